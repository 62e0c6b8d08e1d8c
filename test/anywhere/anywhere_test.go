// Package anywhere checks that the project's tests pass wherever a user
// clones it: in a folder that only its owner may enter (root's home, or
// what `mktemp -d` makes), where the postgres user that runs the private
// PostgreSQL servers for a root caller cannot reach the checkout.
package anywhere

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/lambdarie"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestClosedFolder copies the working tree (what git tracks, and what it
// does not ignore) into a fresh folder of mode 0700 and runs there the
// PostgreSQL 16 rehearsal (the server installed from npm) and one suite on
// PostgreSQL 15 (the shared private cluster that the copy starts for
// itself), then stops what the copy started.
func TestClosedFolder(t *testing.T) {
	if os.Getenv("ICHIDO_TEST_ANYWHERE") == "" {
		t.Skip("make test runs it after the other packages (make test-anywhere): it starts servers of its own, whose load would slow the others' timed cases")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	root, err := pgtest.ModuleRoot()
	require.NoError(t, err)

	parent, err := os.MkdirTemp("", "ichido-anywhere-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(parent) })
	fi, err := os.Stat(parent)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "the folder must be closed to other users")
	clone := filepath.Join(parent, "ichido")
	copyWorkingTree(t, root, clone)

	env := cloneEnv()
	// The emulator is the outer run's, when it has one, so that the copy
	// does not build it again.
	if rie, err := lambdarie.Ensure(ctx); err == nil {
		env = append(env, "AWS_LAMBDA_RIE="+rie)
	}
	t.Cleanup(func() { stopShared(t, clone, env) })

	for _, run := range []struct{ pkg, pattern string }{
		{"internal/rehearse", "^TestRehearse$/^postgres16$"},
		{"internal/migrate", "."},
	} {
		out, err := goCmd(ctx, clone, env, "test", "-count=1", "-timeout", "8m", "-v", "-run", run.pattern, "./"+run.pkg)
		require.NoError(t, err, "go test ./%s in a copy under a folder of mode 0700:\n%s", run.pkg, out)
		require.Regexp(t, `(?m)^ok\s+github.com/ichido/ichido/`+run.pkg+`\s`, out)
		require.Regexp(t, `(?m)^--- PASS: `, out, "./%s ran no test", run.pkg)
		require.NotContains(t, out, "--- SKIP: TestRehearse")
	}

	// The PostgreSQL 15 suite ran on a cluster of the copy's own, which the
	// postgres user could reach although the copy's .local could not be.
	b, err := os.ReadFile(filepath.Join(clone, ".local", "pg", "state.json"))
	require.NoError(t, err, "the copy's tests started no shared cluster of their own")
	var st struct {
		Dir string `json:"dir"`
	}
	require.NoError(t, json.Unmarshal(b, &st))
	if os.Geteuid() == 0 {
		require.False(t, strings.HasPrefix(st.Dir, clone+string(filepath.Separator)),
			"as root, the data directory %s must lie outside the closed folder", st.Dir)
		t.Cleanup(func() { _ = os.RemoveAll(st.Dir) })
	}
}

// copyWorkingTree copies every file git lists (tracked, and untracked but
// not ignored) from src to dst, keeping their modes.
func copyWorkingTree(t *testing.T, src, dst string) {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = src
	list, err := cmd.Output()
	require.NoError(t, err, "git ls-files")
	n := 0
	for name := range strings.SplitSeq(strings.TrimRight(string(list), "\x00"), "\x00") {
		from := filepath.Join(src, name)
		fi, err := os.Lstat(from)
		if os.IsNotExist(err) {
			continue // deleted in the working tree
		}
		require.NoError(t, err)
		if !fi.Mode().IsRegular() {
			continue
		}
		to := filepath.Join(dst, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(to), 0o755))
		copyFile(t, from, to, fi.Mode().Perm())
		n++
	}
	require.Greater(t, n, 100, "the copy holds too few files to be the project")
}

func copyFile(t *testing.T, from, to string, mode os.FileMode) {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
}

// cloneEnv is this process's environment without what would point the copy
// at the outer run's database or port.
func cloneEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "TEST_DATABASE_URL", "DATABASE_URL", pgtest.EnvPort, "AWS_LAMBDA_RIE", "ICHIDO_TEST_ANYWHERE":
			continue
		}
		env = append(env, kv)
	}
	return env
}

func goCmd(ctx context.Context, dir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = env
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	return buf.String(), err
}

// stopShared stops the shared cluster the copy's tests started.
func stopShared(t *testing.T, clone string, env []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := goCmd(ctx, clone, env, "run", "./cmd/devdb", "stop"); err != nil {
		t.Logf("stopping the copy's private PostgreSQL: %v\n%s", err, out)
	}
}
