package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestProgramOutsideTheRepository builds testdata/outside, a program in a
// module of its own in a folder outside the repository, and runs it on a
// database of its own in the test cluster (not the cron database): one
// pgstore.Migrate call creates the key store in the program's schema, and
// its wrapped handler, with a UserIDFunc of the program's own, answers a
// request, then replays it. The program imports only pkg/idempotency and
// pgstore of the library's module, and the test checks that too.
func TestProgramOutsideTheRepository(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := outsideModule(t)

	// A database of its own in the cluster.
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	t.Cleanup(admin.Close) // after the cleanup below, which needs it
	name := fmt.Sprintf("orders_%d", time.Now().UnixNano()%1_000_000_000)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE database = $1`, name)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name

	imports := exec.CommandContext(ctx, "go", "list", "-mod=mod", "-f", `{{join .Imports "\n"}}`, ".")
	imports.Dir = dir
	imports.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	direct, err := imports.CombinedOutput()
	require.NoError(t, err, "%s", direct)
	var ours []string
	for _, imp := range strings.Fields(string(direct)) {
		if strings.HasPrefix(imp, "github.com/ichido/ichido/") {
			ours = append(ours, imp)
		}
	}
	require.Equal(t, []string{"github.com/ichido/ichido/pkg/idempotency", "github.com/ichido/ichido/pkg/idempotency/pgstore"}, ours)

	build := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-o", filepath.Join(dir, "orders"), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the program outside the repository:\n%s", out)

	run := exec.CommandContext(ctx, filepath.Join(dir, "orders"))
	run.Env = append(os.Environ(), "DATABASE_URL="+u.String())
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	// The decorator's JSON log and metric lines go to stdout too, as on
	// Lambda; the program's own lines are the rest.
	var own []string
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if line != "" && !strings.HasPrefix(line, "{") {
			own = append(own, line)
		}
	}
	require.Equal(t, `key store in schema orders_idempotency, 1 migrations applied
201 {"order":"1"} replayed=""
201 {"order":"1"} replayed="true"
401 application/problem+json unauthenticated=true
`, strings.Join(own, ""))

	var jobDB string
	require.NoError(t, admin.QueryRow(ctx, `SELECT database FROM cron.job WHERE jobname = $1`, "purge-idempotency "+name+".orders_idempotency").Scan(&jobDB))
	require.Equal(t, name, jobDB, "the purge is scheduled from the cron database to run in the program's")
}

// The modules of the repository's root module (the sample app and its
// tooling) that a program using the library must not get.
var appOnlyModules = []string{
	"gonum.org/v1/plot",
	"github.com/pb33f/libopenapi",
	"github.com/pressly/goose",
	"github.com/go-chi/chi",
	"github.com/anishathalye/porcupine",
}

// TestOutsideModuleGraph: a module outside the repository that imports
// pkg/idempotency and pgstore (testdata/outside) has in its module graph
// (go list -m all, after go mod tidy) none of the sample app's or the
// tooling's dependencies, nor the repository's root module: the library is a
// module of its own (pkg/go.mod).
func TestOutsideModuleGraph(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := outsideModule(t)
	goCmd := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "go %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	goCmd("mod", "tidy")
	var modules []string
	for _, line := range strings.Split(strings.TrimSpace(goCmd("list", "-m", "all")), "\n") {
		modules = append(modules, strings.Fields(line)[0])
	}
	require.Contains(t, modules, module+"/pkg")
	require.Contains(t, modules, "github.com/jackc/pgx/v5")
	for _, m := range modules {
		require.NotEqual(t, module, m, "the repository's root module is in the graph of a program that imports the library")
		for _, app := range appOnlyModules {
			require.False(t, m == app || strings.HasPrefix(m, app+"/"),
				"%s (a dependency of the sample app or its tooling) is in the module graph of a program that imports the library:\n%s", m, strings.Join(modules, "\n"))
		}
	}
	t.Logf("go list -m all: %d modules", len(modules))
}

// module is the repository's root module path; the library's module is
// module + "/pkg".
const module = pgtest.RootModule

// outsideModule writes testdata/outside into a new folder outside the
// repository as a module of its own that requires the library's module
// (pkg/go.mod), with replace directives to this checkout's pkg/ and
// internal/testkit/ (the library's module requires the latter for its
// tests), and the library's go.sum.
func outsideModule(t *testing.T) string {
	t.Helper()
	root, err := pgtest.ModuleRoot()
	require.NoError(t, err)
	lib := filepath.Join(root, "pkg")
	goVersion := ""
	mod, err := os.ReadFile(filepath.Join(lib, "go.mod"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(mod), "\n") {
		if v, ok := strings.CutPrefix(line, "go "); ok {
			goVersion = strings.TrimSpace(v)
		}
	}
	require.NotEmpty(t, goVersion)

	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "outside", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(fmt.Sprintf(
		"module example.com/orders\n\ngo %s\n\nrequire %s/pkg v0.0.0\n\nreplace (\n\t%s/pkg => %s\n\t%s/internal/testkit => %s\n)\n",
		goVersion, module, module, lib, module, filepath.Join(root, "internal", "testkit"))), 0o644))
	sum, err := os.ReadFile(filepath.Join(lib, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	return dir
}
