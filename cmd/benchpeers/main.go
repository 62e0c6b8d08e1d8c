// Command benchpeers runs ichido's replay beside a peer library's, the
// library itself, on one PostgreSQL, from outside the repository: the
// harness (testdata/harness) is built in a module of its own that installs
// ichido's published modules from a proxy of the working tree, as a user
// installs them, and the peer from a checkout of its source, since the Go
// module proxy does not serve it.
//
//	go run ./cmd/benchpeers -gopotency DIR [-database-url URL] [-reps 7] [-rounds 3000] [-dur 2s]
//
// DIR is a checkout of github.com/fco-gt/gopotency at its v1.0.0 tag.
// Without -database-url (or DATABASE_URL) the repository's private
// PostgreSQL cluster is used (make db-start's). It prints a Markdown table:
// the p50 of each side at one client, turn by turn, and its requests/s and
// client CPU at eight, with the ratios of ichido's sides to gopotency's,
// written to docs/performance-peers.md (-out). make bench-peers runs it.
package main

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/ichido/ichido/internal/release"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

//go:embed testdata/harness/main.go
var harness []byte

// version is the one the proxy gives ichido's modules: the harness is
// built with a module cache of its own, so no other build sees it.
const version = "v0.0.1"

func main() {
	if err := run(context.Background(), os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("benchpeers", flag.ContinueOnError)
	gopotency := fs.String("gopotency", "", "a checkout of github.com/fco-gt/gopotency at v1.0.0 (required)")
	url := fs.String("database-url", os.Getenv("DATABASE_URL"), "PostgreSQL URL (default: the repository's private cluster)")
	reps := fs.Int("reps", 7, "repetitions")
	rounds := fs.Int("rounds", 3000, "turns per repetition at one client")
	dur := fs.Duration("dur", 2*time.Second, "time of each side in each repetition at eight clients")
	out := fs.String("out", "docs/performance-peers.md", "the report, from the repository's root (- for standard output)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *gopotency == "" {
		return errors.New("-gopotency is required: a checkout of github.com/fco-gt/gopotency at its v1.0.0 tag (the Go module proxy does not serve it)")
	}
	peer, err := filepath.Abs(*gopotency)
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(peer, "storage", "sql", "sql.go")); err != nil {
		return fmt.Errorf("-gopotency %s: not a checkout of gopotency (no storage/sql/sql.go)", peer)
	}
	if *url == "" {
		if *url, err = pgtest.SharedURL(ctx); err != nil {
			return err
		}
	}
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "benchpeers-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	proxy, work := filepath.Join(tmp, "proxy"), filepath.Join(tmp, "harness")
	if _, err := release.WriteProxy(ctx, root, version, proxy); err != nil {
		return fmt.Errorf("the proxy of the working tree: %w", err)
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	gomod := fmt.Sprintf(`module example.com/peers

go 1.26.0

require (
	github.com/fco-gt/gopotency v1.0.0
	github.com/ichido/ichido/pkg %[1]s
	github.com/ichido/ichido/pkg/dbpool %[1]s
	github.com/ichido/ichido/pkg/idempotency/pgstore %[1]s
)

replace github.com/fco-gt/gopotency => %[2]s
`, version, strconv.Quote(peer))
	if err := os.WriteFile(filepath.Join(work, "go.mod"), []byte(gomod), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(work, "main.go"), harness, 0o644); err != nil {
		return err
	}
	env, err := release.ProxyEnv(ctx, proxy, filepath.Join(tmp, "modcache"))
	if err != nil {
		return err
	}
	bin := filepath.Join(work, "harness")
	for _, argv := range [][]string{{"go", "mod", "tidy"}, {"go", "build", "-o", bin, "."}} {
		if err := command(ctx, work, env, argv...); err != nil {
			return err
		}
	}
	var table bytes.Buffer
	started := time.Now().UTC()
	load, _ := os.ReadFile("/proc/loadavg")
	run := exec.CommandContext(ctx, bin, "-database-url", *url,
		"-reps", strconv.Itoa(*reps), "-rounds", strconv.Itoa(*rounds), "-dur", dur.String())
	run.Dir, run.Stdout, run.Stderr = work, &table, os.Stderr
	if err := run.Run(); err != nil {
		return fmt.Errorf("the harness: %w", err)
	}
	report := fmt.Sprintf(reportHead, started.Format("2006-01-02 15:04 MST"), runtime.NumCPU(), strings.Join(strings.Fields(string(load))[:3], " "), time.Since(started).Round(time.Second)) + table.String() + reportTail
	if *out == "-" {
		_, err := os.Stdout.WriteString(report)
		return err
	}
	path := filepath.Join(root, *out)
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Println("wrote", path)
	return nil
}

const reportHead = `# ichido beside gopotency, the library itself

<!-- Written by make bench-peers (go run ./cmd/benchpeers); do not edit by hand. -->

One run on %s, %d CPUs, load average %s at the start; it took %s. ichido's published modules were installed from a proxy of the working tree into a module outside the repository, and gopotency v1.0.0 (github.com/fco-gt/gopotency, net/http middleware and storage/sql) was built from its source, which the Go module proxy does not serve.

Both libraries replay a completed key of the same request on the same PostgreSQL: a POST of a small JSON body, answered with 201, a JSON body and two headers. ichido keeps its records with pgstore on a dbpool pool in the prepared mode, gopotency with its storage/sql on database/sql with pgx's driver; each has 8 connections. ichido writes its one JSON log line per request (the specification asks for it) to /dev/null, and Wrap its metric line too, as Lambda ships both; a net/http server writes no metric line by default; gopotency writes no line. Each net/http side makes a request and a recorder per call, as a server would; the handler alone, unprotected, shows what that costs, and a Middleware whose log line is formatted but discarded (io.Discard) what writing the line costs. The store's calls alone are ichido's claim of a completed key and gopotency's storage Get of one (its SELECT and the JSON decoding of its record).

At one client the sides are measured turn by turn, each turn calling every side once in an order that rotates, and the p50 of each repetition is given; at eight clients each side runs alone for its time, in an order that rotates per repetition, and client CPU is this process's CPU time per request (the server's is not in it).

`

const reportTail = `
On a machine shared by client and server, eight clients are CPU-bound: requests/s follows the CPU a request costs on both sides together, and a ratio is the better guide than a figure. Run it again with make bench-peers GOPOTENCY=path.
`

func command(ctx context.Context, dir string, env []string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", argv, err)
	}
	return nil
}
