package apptest

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// Build compiles the module's commands pkgs (such as "./cmd/localapi")
// into a folder of the test's own and returns it.
func Build(t testing.TB, pkgs ...string) string {
	t.Helper()
	root, err := pgtest.ModuleRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	build := exec.Command("go", append([]string{"build", "-o", dir + string(filepath.Separator)}, pkgs...)...)
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building %v: %s", pkgs, out)
	return dir
}

// StartLocalAPI runs the local API binary of bin (Build's folder) as
// `make run` does (the real functions behind the emulated gateway), on a
// free loopback port, on db (New's schema, already migrated), and returns
// its base URL. It is stopped when the test ends.
func StartLocalAPI(t testing.TB, bin string, db *pgtest.DB) string {
	t.Helper()
	root, err := pgtest.ModuleRoot()
	require.NoError(t, err)
	cmd := exec.Command(filepath.Join(bin, "localapi"), "-addr", "127.0.0.1:0", "-template", filepath.Join(root, "template.yaml"), "-migrate=false")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "LOG_LEVEL=error")
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if line := sc.Text(); strings.HasPrefix(line, "ready: ") {
				ready <- line
			}
		}
		done <- cmd.Wait()
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Error("the local API did not stop within 30s")
		}
	})
	select {
	case line := <-ready:
		i := strings.Index(line, "http://")
		require.Positive(t, i, line)
		return strings.Fields(line[i:])[0]
	case err := <-done:
		t.Fatalf("the local API stopped before it was ready: %v\n%s", err, stderr.String())
	case <-time.After(2 * time.Minute):
		t.Fatalf("the local API printed no ready line within 2 minutes\n%s", stderr.String())
	}
	return ""
}
