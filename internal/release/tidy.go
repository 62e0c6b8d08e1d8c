package release

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Tidy runs go mod tidy in every module of the repository but the root
// one. Each is tidied on its own (GOWORK=off), with its siblings replaced
// by their folders for the run, then the replaces are dropped and the
// siblings required at the development placeholder v0.0.0, or at the
// version the go.mod already named.
func Tidy(ctx context.Context, root string) error {
	dirs, err := nestedModules(root)
	if err != nil {
		return err
	}
	paths := map[string]string{} // folder → module path
	for _, d := range dirs {
		f, err := readModFile(filepath.Join(root, d, "go.mod"))
		if err != nil {
			return err
		}
		paths[d] = f.Module.Mod.Path
	}
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	for _, d := range dirs {
		dir := filepath.Join(root, d)
		before, err := readModFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return err
		}
		kept := map[string]string{}
		for _, r := range before.Require {
			kept[r.Mod.Path] = r.Mod.Version
		}
		args := []string{"mod", "edit"}
		for other, path := range paths {
			if other == d {
				continue
			}
			rel, err := filepath.Rel(dir, filepath.Join(root, other))
			if err != nil {
				return err
			}
			if !strings.HasPrefix(rel, "..") {
				rel = "./" + rel
			}
			args = append(args, "-replace="+path+"="+filepath.ToSlash(rel))
		}
		if out, err := goCmd(ctx, dir, env, args...); err != nil {
			return fmt.Errorf("%s: go mod edit: %v\n%s", d, err, out)
		}
		out, tidyErr := goCmd(ctx, dir, env, "mod", "tidy")
		f, err := readModFile(filepath.Join(dir, "go.mod"))
		if err != nil {
			return err
		}
		for _, path := range paths {
			_ = f.DropReplace(path, "")
		}
		for _, r := range f.Require {
			if _, ours := pathsHas(paths, r.Mod.Path); ours {
				v := kept[r.Mod.Path]
				if v == "" {
					v = "v0.0.0"
				}
				if err := f.AddRequire(r.Mod.Path, v); err != nil {
					return err
				}
			}
		}
		f.Cleanup()
		data, err := f.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "go.mod"), data, 0o644); err != nil {
			return err
		}
		if tidyErr != nil {
			return fmt.Errorf("%s: go mod tidy: %v\n%s", d, tidyErr, out)
		}
	}
	return nil
}

func pathsHas(paths map[string]string, path string) (string, bool) {
	for d, p := range paths {
		if p == path {
			return d, true
		}
	}
	return "", false
}
