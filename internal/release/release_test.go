package release_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"github.com/ichido/ichido/internal/release"
)

// The version the check writes into its proxy. It is never tagged.
const version = "v0.99.0"

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "go.work"))
	return dir
}

// moduleFiles returns the content of every go.mod, go.sum and go.work.sum of
// the repository, so that a test can show that a command left them as they
// were.
func moduleFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	files := map[string]string{}
	require.NoError(t, filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".local" || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		switch d.Name() {
		case "go.mod", "go.sum", "go.work", "go.work.sum":
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			files[path] = string(data)
		}
		return nil
	}))
	return files
}

// TestRelease is the release check: a proxy holding every published module
// as v0.99.0 would tag it from the working tree, and outside modules, one
// per store and adapter, a store author's and the operations command's,
// that go get, go mod tidy, go build and go vet through it with no replace.
// Each consumer's module graph holds no other store's client and no module
// of the repository that is never tagged. Neither this nor go doc run in
// each published module changes a go.mod, go.sum or go.work.sum.
func TestRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root := repoRoot(t)
	before := moduleFiles(t, root)

	proxy := t.TempDir()
	mods, err := release.WriteProxy(ctx, root, version, proxy)
	require.NoError(t, err)
	require.NotEmpty(t, mods)
	for _, m := range mods {
		f, err := modfile.Parse(m.Dir+"/go.mod", m.GoMod, nil)
		require.NoError(t, err)
		require.Empty(t, f.Replace, "%s: a published go.mod has no replace", m.Path)
		require.NotNil(t, f.Go)
		require.Regexp(t, `^1\.\d+\.0$`, f.Go.Version, "%s: the go line is the lowest Go supported (go 1.N.0)", m.Path)
		for _, r := range f.Require {
			if strings.HasPrefix(r.Mod.Path, release.Root+"/") {
				require.Equal(t, version, r.Mod.Version, "%s requires its sibling %s at the release's version", m.Path, r.Mod.Path)
			}
		}
		esc, err := module.EscapePath(m.Path)
		require.NoError(t, err)
		for _, ext := range []string{".zip", ".mod", ".info"} {
			require.FileExists(t, filepath.Join(proxy, esc, "@v", version+ext))
		}
	}

	var out bytes.Buffer
	err = release.CheckConsumers(ctx, root, proxy, version, &out)
	t.Log("\n" + out.String())
	require.NoError(t, err)
	require.Equal(t, len(release.Consumers), strings.Count(out.String(), "release check: "))

	// go doc of each published package, run in its module's folder, and
	// go list -m all there read, and write nothing.
	goIn := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, "go", args...)
		cmd.Dir = filepath.Join(root, dir)
		out, err := cmd.Output()
		require.NoError(t, err, "go %s in %s: %s", strings.Join(args, " "), dir, out)
		return string(out)
	}
	for _, m := range mods {
		goIn(m.Dir, "list", "-m", "all")
		for _, p := range strings.Fields(goIn(m.Dir, "list", "./...")) {
			goIn(m.Dir, "doc", p)
		}
	}
	after := moduleFiles(t, root)
	for path, content := range before {
		require.Equal(t, content, after[path], "%s changed while the release was checked and go doc ran: commit it as the go commands leave it", path)
	}
	require.Len(t, after, len(before))
}

// A published go.mod with a replace directive is refused.
func TestPublishedModuleWithReplace(t *testing.T) {
	t.Parallel()
	root := repoRoot(t)
	copyRoot := t.TempDir()
	for path := range moduleFiles(t, root) {
		rel, err := filepath.Rel(root, path)
		require.NoError(t, err)
		if filepath.Base(rel) != "go.mod" {
			continue
		}
		data, err := os.ReadFile(path)
		require.NoError(t, err)
		if filepath.Dir(rel) == filepath.Join("pkg", "idempotency", "pgstore") {
			data = append(data, []byte("\nreplace github.com/ichido/ichido/pkg => ../../\n")...)
		}
		require.NoError(t, os.MkdirAll(filepath.Join(copyRoot, filepath.Dir(rel)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(copyRoot, rel), data, 0o644))
	}
	_, err := release.Modules(copyRoot)
	require.ErrorContains(t, err, "replace")
}

func TestCheckVersion(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"v0.1.0", "v1.2.3", "v0.1.0-rc.1"} {
		require.NoError(t, release.CheckVersion(v), v)
	}
	for _, v := range []string{"", "0.1.0", "v1", "v1.2", "v1.2.3+meta", "latest"} {
		require.Error(t, release.CheckVersion(v), v)
	}
}

func TestBreakAllowed(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		prev, version string
		allowed       bool
	}{
		{"v0.99.0", "v0.99.1", false},
		{"v0.99.0", "v0.100.0", true},
		{"v1.2.0", "v1.3.0", false},
		{"v1.2.0", "v2.0.0", true},
	} {
		require.Equal(t, c.allowed, release.BreakAllowed(c.prev, c.version), "%s → %s", c.prev, c.version)
	}
}
