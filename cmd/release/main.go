// Command release prepares a release of the library's modules without
// pushing anything.
//
//	release proxy -version vX.Y.Z -dir DIR   write a module proxy holding every published module
//	release check -version vX.Y.Z -dir DIR   try the proxy from outside modules, as users will
//	release tag -version vX.Y.Z              write the version into the go.mod files, check the
//	                                         changelog and the API, try the release, print the tags
//	release tidy                             go mod tidy in every module but the root one
//
// make release-proxy and make release run it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"

	"github.com/ichido/ichido/internal/release"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

const usage = `usage:
  release proxy -version vX.Y.Z -dir DIR
  release check -version vX.Y.Z -dir DIR
  release tag -version vX.Y.Z
  release tidy`

func run(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Println(usage)
		return nil
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	version := fs.String("version", "", "the release's version (vX.Y.Z)")
	dir := fs.String("dir", "", "the module proxy's folder")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q\n%s", fs.Args(), usage)
	}
	root, err := repoRoot()
	if err != nil {
		return err
	}
	if args[0] == "tidy" {
		return release.Tidy(ctx, root)
	}
	if err := release.CheckVersion(*version); err != nil {
		return err
	}
	switch args[0] {
	case "proxy":
		if *dir == "" {
			return errors.New("-dir is required: the folder to write the proxy into")
		}
		mods, err := release.WriteProxy(ctx, root, *version, *dir)
		if err != nil {
			return err
		}
		abs, _ := filepath.Abs(*dir)
		fmt.Printf("wrote %d modules at %s to %s\n", len(mods), *version, abs)
		fmt.Printf("try them: GOPROXY=file://%s,$(go env GOPROXY) GONOSUMDB=%s go get %s/pkg@%s\n", abs, release.Root, release.Root, *version)
		return nil
	case "check":
		if *dir == "" {
			return errors.New("-dir is required: a proxy written by release proxy")
		}
		return release.CheckConsumers(ctx, root, *dir, *version, os.Stdout)
	case "tag":
		return release.Prepare(ctx, root, *version, os.Stdout)
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}

// repoRoot is the folder holding go.work, found upwards from the working
// directory.
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
