package release

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// CheckVersion returns an error unless version is a release version
// (vMAJOR.MINOR.PATCH, with no build metadata).
func CheckVersion(version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version || semver.Build(version) != "" {
		return fmt.Errorf("version %q is not a release version such as v0.1.0", version)
	}
	return nil
}

// A Written module is one that WriteProxy put in the proxy.
type Written struct {
	Module
	// GoMod and GoSum are the go.mod and go.sum the proxy holds for it:
	// its siblings required at the version, its go.sum made by go mod tidy
	// through the proxy.
	GoMod, GoSum []byte
}

// WriteProxy writes into dir a module proxy (the layout GOPROXY=file://dir
// reads) holding every published module of the repository at root as
// version would tag it from the working tree: the files git tracks or would
// track, each go.mod requiring its siblings at version, each go.sum made by
// go mod tidy through the proxy itself. It returns the modules in
// dependency order.
func WriteProxy(ctx context.Context, root, version, dir string) ([]Written, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	mods, err := Modules(root)
	if err != nil {
		return nil, err
	}
	nested, err := nestedModules(root)
	if err != nil {
		return nil, err
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "ichido-release-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	env, err := ProxyEnv(ctx, dir, filepath.Join(work, "modcache"))
	if err != nil {
		return nil, err
	}

	var written []Written
	for _, m := range mods {
		w, err := writeModule(ctx, root, m, version, dir, filepath.Join(work, strings.ReplaceAll(m.Dir, "/", "_")), nested, env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.Path, err)
		}
		written = append(written, w)
	}
	return written, nil
}

// ProxyEnv is the environment of go commands that resolve the repository's
// modules through the proxy in dir (first in GOPROXY; then the modules this
// machine already downloaded, then the usual proxy), outside any workspace,
// with no checksum database lookup for the repository's modules. Modules are
// kept in modcache, a module cache of the run's own: the go command trusts
// that a version in its module cache never changes, and a proxy written
// again at the same version holds other files. Builds are -trimpath, so the
// build cache serves them whatever the module cache's folder.
func ProxyEnv(ctx context.Context, dir, modcache string) ([]string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOPROXY", "GOMODCACHE").Output()
	if err != nil {
		return nil, fmt.Errorf("go env GOPROXY GOMODCACHE: %w", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	upstream, shared := strings.TrimSpace(lines[0]), ""
	if len(lines) > 1 {
		shared = strings.TrimSpace(lines[1])
	}
	proxy := "file://" + filepath.ToSlash(dir)
	if shared != "" {
		proxy += ",file://" + filepath.ToSlash(filepath.Join(shared, "cache", "download"))
	}
	if upstream != "" && upstream != "off" {
		proxy += "," + upstream
	}
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		for _, name := range []string{"GOWORK=", "GOPROXY=", "GONOSUMDB=", "GOFLAGS=", "GOPRIVATE=", "GONOPROXY=", "GOMODCACHE="} {
			if strings.HasPrefix(kv, name) {
				return true
			}
		}
		return false
	})
	return append(env, "GOWORK=off", "GOPROXY="+proxy, "GONOSUMDB="+Root, "GOFLAGS=-mod=mod -modcacherw -trimpath", "GOMODCACHE="+modcache), nil
}

func writeModule(ctx context.Context, root string, m Module, version, proxy, work string, nested, env []string) (Written, error) {
	files, err := moduleFiles(ctx, root, m.Dir, nested)
	if err != nil {
		return Written{}, err
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, m.Dir, f))
		if err != nil {
			return Written{}, err
		}
		dst := filepath.Join(work, f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return Written{}, err
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return Written{}, err
		}
	}

	// The siblings at the version, then go.sum through the proxy.
	gomod := filepath.Join(work, "go.mod")
	f, err := readModFile(gomod)
	if err != nil {
		return Written{}, err
	}
	for _, s := range m.Siblings {
		if err := f.AddRequire(s, version); err != nil {
			return Written{}, err
		}
	}
	f.Cleanup()
	data, err := f.Format()
	if err != nil {
		return Written{}, err
	}
	if err := os.WriteFile(gomod, data, 0o644); err != nil {
		return Written{}, err
	}
	if err := os.Remove(filepath.Join(work, "go.sum")); err != nil && !os.IsNotExist(err) {
		return Written{}, err
	}
	if out, err := goCmd(ctx, work, env, "mod", "tidy"); err != nil {
		return Written{}, fmt.Errorf("go mod tidy through the release proxy: %v\n%s", err, out)
	}
	w := Written{Module: m}
	if w.GoMod, err = os.ReadFile(gomod); err != nil {
		return Written{}, err
	}
	if after, err := modfile.Parse(gomod, w.GoMod, nil); err != nil {
		return Written{}, err
	} else {
		for _, r := range after.Require {
			if (r.Mod.Path == Root || strings.HasPrefix(r.Mod.Path, Root+"/")) && r.Mod.Version != version {
				return Written{}, fmt.Errorf("requires %s@%s, not the release's version %s", r.Mod.Path, r.Mod.Version, version)
			}
		}
	}
	if w.GoSum, err = os.ReadFile(filepath.Join(work, "go.sum")); err != nil && !os.IsNotExist(err) {
		return Written{}, err
	}

	// The proxy's files: the zip, the go.mod, the info and the list.
	escPath, err := module.EscapePath(m.Path)
	if err != nil {
		return Written{}, err
	}
	at := filepath.Join(proxy, filepath.FromSlash(escPath), "@v")
	if err := os.MkdirAll(at, 0o755); err != nil {
		return Written{}, err
	}
	var z bytes.Buffer
	if err := zip.CreateFromDir(&z, module.Version{Path: m.Path, Version: version}, work); err != nil {
		return Written{}, err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return Written{}, err
	}
	for name, content := range map[string][]byte{version + ".zip": z.Bytes(), version + ".mod": w.GoMod, version + ".info": info} {
		if err := os.WriteFile(filepath.Join(at, name), content, 0o644); err != nil {
			return Written{}, err
		}
	}
	list := filepath.Join(at, "list")
	old, err := os.ReadFile(list)
	if err != nil && !os.IsNotExist(err) {
		return Written{}, err
	}
	versions := strings.Fields(string(old))
	if !slices.Contains(versions, version) {
		versions = append(versions, version)
	}
	semver.Sort(versions)
	return w, os.WriteFile(list, []byte(strings.Join(versions, "\n")+"\n"), 0o644)
}

// moduleFiles lists the files of the module in dir (relative to root) that
// git tracks or would track, leaving out nested modules' files, relative to
// dir.
func moduleFiles(ctx context.Context, root, dir string, nested []string) ([]string, error) {
	cmd := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", dir)
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files %s: %w", dir, err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if _, err := os.Lstat(filepath.Join(root, f)); err != nil {
			continue // deleted in the working tree
		}
		inner := false
		for _, n := range nested {
			if n != dir && strings.HasPrefix(n+"/", dir+"/") && strings.HasPrefix(f, n+"/") {
				inner = true
			}
		}
		if !inner {
			files = append(files, strings.TrimPrefix(f, dir+"/"))
		}
	}
	if !slices.Contains(files, "go.mod") {
		return nil, fmt.Errorf("%s/go.mod is not in the working tree", dir)
	}
	return files, nil
}

func goCmd(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	return cmd.CombinedOutput()
}
