package release

import (
	"context"
	"embed"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// A Consumer is a module outside the repository that a user would write,
// kept under testdata/consumers/Name.
type Consumer struct {
	// Name is the folder under testdata/consumers.
	Name string
	// Get are the folders of the published modules it requires, at the
	// release's version.
	Get []string
	// Tool gets the operations command with go get -tool instead.
	Tool bool
	// Test runs go test as well (a store author's suite).
	Test bool
	// Want are modules its graph must hold; Forbid are prefixes of module
	// paths it must not hold, besides the ones no consumer may hold.
	Want, Forbid []string
}

// Store clients and frameworks, by module path prefix.
const (
	pgx      = "github.com/jackc/pgx"
	goRedis  = "github.com/redis/go-redis"
	awsSDK   = "github.com/aws/aws-sdk-go-v2"
	dynamoDB = "github.com/aws/aws-sdk-go-v2/service/dynamodb"
	gin      = "github.com/gin-gonic/gin"
	echo     = "github.com/labstack/echo"
	grpc     = "google.golang.org/grpc"
	connect  = "connectrpc.com/connect"
	otel     = "go.opentelemetry.io/otel"
)

// neverInAGraph are the repository's modules that are never tagged, and
// the sample app's and the tooling's dependencies.
var neverInAGraph = []string{
	Root + "/internal/",
	"gonum.org/v1/plot",
	"github.com/pressly/goose",
	"github.com/go-chi/chi",
	"github.com/anishathalye/porcupine",
	"github.com/pb33f/",
}

// Consumers are the programs the release check builds: one per store and
// per framework adapter, a store author's module and the operations
// command.
var Consumers = []Consumer{
	{Name: "lambda-postgres", Get: []string{"pkg", "pkg/idempotency/pgstore", "pkg/dbpool"},
		Want: []string{pgx, "github.com/aws/aws-lambda-go"}, Forbid: []string{goRedis, dynamoDB, gin, echo, grpc, connect, otel}},
	{Name: "gin-redis", Get: []string{"pkg", "pkg/idempotency/ginidem", "pkg/idempotency/redisstore"},
		Want: []string{gin, goRedis}, Forbid: []string{pgx, awsSDK, echo, grpc, connect}},
	{Name: "grpc-otel-postgres", Get: []string{"pkg", "pkg/idempotency/grpcidem", "pkg/idempotency/otelidem", "pkg/idempotency/pgstore"},
		Want: []string{grpc, otel, pgx}, Forbid: []string{goRedis, awsSDK, gin, echo}},
	{Name: "http-dynamodb", Get: []string{"pkg", "pkg/idempotency/dynamostore"},
		Want: []string{dynamoDB}, Forbid: []string{pgx, goRedis, gin, echo, grpc, connect}},
	{Name: "echo-connect-memstore", Get: []string{"pkg", "pkg/idempotency/echoidem", "pkg/idempotency/connectidem"},
		Want: []string{echo, connect}, Forbid: []string{pgx, goRedis, awsSDK, gin, grpc}},
	{Name: "store-author", Get: []string{"pkg"}, Test: true,
		Forbid: []string{pgx, goRedis, awsSDK, gin, echo, grpc, connect, otel}},
	{Name: "keystore-tool", Get: []string{"cmd/keystore"}, Tool: true},
}

//go:embed all:testdata/consumers
var consumerFiles embed.FS

// CheckConsumers builds every consumer through the proxy in dir, which
// holds the published modules at version, and writes a line per consumer
// to w: its module and package counts.
func CheckConsumers(ctx context.Context, root, dir, version string, w io.Writer) error {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "ichido-consumers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	env, err := ProxyEnv(ctx, dir, filepath.Join(work, "modcache"))
	if err != nil {
		return err
	}
	for _, c := range Consumers {
		r, err := c.Check(ctx, filepath.Join(work, c.Name), version, env)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", c.Name, err)
		}
		fmt.Fprintf(w, "release check: %-22s %3d modules, %4d packages compiled (%s)\n", c.Name, r.Modules, r.Packages, r.Steps)
	}
	return nil
}

// Report is what a consumer's check found.
type Report struct {
	// Modules is the length of go list -m all, the consumer's own
	// included; Packages the packages outside the standard library that
	// go build compiles.
	Modules, Packages int
	// Graph is go list -m all.
	Graph []string
	// Steps are the go commands that passed.
	Steps string
}

// Check writes the consumer into dir as a module of its own and runs, with
// env (see ProxyEnv), go get, go mod tidy, go build, go vet (and go test),
// then checks its module graph.
func (c Consumer) Check(ctx context.Context, dir, version string, env []string) (Report, error) {
	src, err := fs.Sub(consumerFiles, "testdata/consumers/"+c.Name)
	if err != nil {
		return Report{}, err
	}
	if err := os.CopyFS(dir, src); err != nil {
		return Report{}, err
	}
	mod := fmt.Sprintf("module example.com/%s\n\ngo 1.26.0\n", c.Name)
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod), 0o644); err != nil {
		return Report{}, err
	}
	run := func(args ...string) (string, error) {
		out, err := goCmd(ctx, dir, env, args...)
		if err != nil {
			return "", fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out), nil
	}
	get := []string{"get"}
	if c.Tool {
		get = append(get, "-tool")
	}
	for _, m := range c.Get {
		get = append(get, Root+"/"+m+"@"+version)
	}
	steps := []([]string){get, {"mod", "tidy"}}
	if c.Tool {
		steps = append(steps, []string{"build", "-o", os.DevNull, "tool"}, []string{"tool", "keystore", "-sql", "-"})
	} else {
		steps = append(steps, []string{"build", "./..."}, []string{"vet", "./..."})
	}
	if c.Test {
		steps = append(steps, []string{"test", "-count=1", "./..."})
	}
	var names []string
	for _, s := range steps {
		if _, err := run(s...); err != nil {
			return Report{}, err
		}
		names = append(names, s[0])
	}

	graph, err := run("list", "-m", "all")
	if err != nil {
		return Report{}, err
	}
	r := Report{Steps: strings.Join(slices.Compact(names), ", ")}
	for _, line := range strings.Split(strings.TrimSpace(graph), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			r.Graph = append(r.Graph, f[0])
		}
	}
	r.Modules = len(r.Graph)
	pattern := "./..."
	if c.Tool {
		pattern = "tool"
	}
	pkgs, err := run("list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", pattern)
	if err != nil {
		return Report{}, err
	}
	r.Packages = len(strings.Fields(pkgs))

	for _, want := range c.Want {
		if !slices.ContainsFunc(r.Graph, func(m string) bool { return hasPrefix(m, want) }) {
			return r, fmt.Errorf("its module graph holds no %s:\n%s", want, graph)
		}
	}
	for _, m := range r.Graph {
		if m == Root {
			return r, fmt.Errorf("its module graph holds the repository's root module (the sample app)")
		}
		for _, bad := range append(slices.Clone(neverInAGraph), c.Forbid...) {
			if hasPrefix(m, bad) {
				return r, fmt.Errorf("its module graph holds %s, which a program importing %s must not get:\n%s", m, strings.Join(c.Get, ", "), graph)
			}
		}
		if strings.HasPrefix(m, Root+"/") && !slices.Contains(published, strings.TrimPrefix(m, Root+"/")) {
			return r, fmt.Errorf("its module graph holds %s, a module of the repository that is never tagged", m)
		}
	}
	return r, nil
}

// hasPrefix reports whether module path m is prefix or below it; a prefix
// that ends in "/" matches anything below it.
func hasPrefix(m, prefix string) bool {
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(m, prefix)
	}
	return m == prefix || strings.HasPrefix(m, prefix+"/")
}
