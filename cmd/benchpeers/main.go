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
// client CPU at eight, with the ratios of ichido's sides to gopotency's.
// make bench-peers runs it.
package main

import (
	"context"
	_ "embed"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	root, err := repoRoot()
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
	return command(ctx, work, os.Environ(), bin, "-database-url", *url,
		"-reps", strconv.Itoa(*reps), "-rounds", strconv.Itoa(*rounds), "-dur", dur.String())
}

func command(ctx context.Context, dir string, env []string, argv ...string) error {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w", argv, err)
	}
	return nil
}

// repoRoot is the folder of the go.work above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("run it inside the repository (no go.work found above the working directory)")
		}
		dir = parent
	}
}
