// Package release writes a module proxy holding the repository's published
// modules as a version would tag them, and checks that modules outside the
// repository can use them as users will: go get, go mod tidy, go build and
// go vet through that proxy, with no replace.
package release

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// Root is the repository's root module path.
const Root = "github.com/ichido/ichido"

// published are the folders of the modules a release tags. Every other
// module of go.work (the sample app, the test helpers, the library's tests
// that need the repository's servers) is never tagged, and nothing
// published requires it.
var published = []string{
	"pkg",
	"pkg/dbpool",
	"pkg/idempotency/pgstore",
	"pkg/idempotency/redisstore",
	"pkg/idempotency/dynamostore",
	"pkg/idempotency/storeenv",
	"pkg/idempotency/grpcidem",
	"pkg/idempotency/connectidem",
	"pkg/idempotency/ginidem",
	"pkg/idempotency/echoidem",
	"pkg/idempotency/otelidem",
	"cmd/keystore",
}

// Module is a published module.
type Module struct {
	// Dir is the module's folder, relative to the repository's root.
	Dir string
	// Path is the module path.
	Path string
	// Siblings are the published modules it requires.
	Siblings []string
}

// Tag is the git tag that releases the module at version.
func (m Module) Tag(version string) string { return m.Dir + "/" + version }

// Modules reads the published modules' go.mod files under root and returns
// them in dependency order: each after the siblings it requires. A
// published go.mod with a replace, or one that requires a module of the
// repository that is not published, is an error.
func Modules(root string) ([]Module, error) {
	byPath := map[string]*Module{}
	var all []*Module
	for _, dir := range published {
		f, err := readModFile(filepath.Join(root, dir, "go.mod"))
		if err != nil {
			return nil, err
		}
		want := Root + "/" + dir
		if f.Module == nil || f.Module.Mod.Path != want {
			return nil, fmt.Errorf("%s/go.mod: the module path must be %s", dir, want)
		}
		if len(f.Replace) > 0 {
			return nil, fmt.Errorf("%s/go.mod has a replace directive: a published module has none (go.work joins the modules for development)", dir)
		}
		m := &Module{Dir: dir, Path: want}
		byPath[want] = m
		all = append(all, m)
		for _, r := range f.Require {
			if r.Mod.Path == Root || strings.HasPrefix(r.Mod.Path, Root+"/") {
				m.Siblings = append(m.Siblings, r.Mod.Path)
			}
		}
	}
	var order []Module
	done := map[string]bool{}
	visiting := map[string]bool{}
	var visit func(m *Module) error
	visit = func(m *Module) error {
		if done[m.Path] {
			return nil
		}
		if visiting[m.Path] {
			return fmt.Errorf("%s requires itself through its siblings", m.Path)
		}
		visiting[m.Path] = true
		for _, s := range m.Siblings {
			dep, ok := byPath[s]
			if !ok {
				return fmt.Errorf("%s requires %s, which is not published: a published module requires no test helper or tooling module", m.Path, s)
			}
			if err := visit(dep); err != nil {
				return err
			}
		}
		done[m.Path] = true
		order = append(order, *m)
		return nil
	}
	for _, m := range all {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// nestedModules returns the folders of root's modules, relative to root,
// other than the root module itself.
func nestedModules(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".local" || d.Name() == "node_modules" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && d.Name() == "go.mod" && filepath.Dir(path) != root {
			rel, err := filepath.Rel(root, filepath.Dir(path))
			if err != nil {
				return err
			}
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	slices.Sort(dirs)
	return dirs, err
}

func readModFile(path string) (*modfile.File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(path, data, nil)
}
