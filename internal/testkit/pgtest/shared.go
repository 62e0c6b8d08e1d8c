package pgtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// state is what .local/pg/state.json remembers of the shared cluster.
type state struct {
	Dir      string `json:"dir"`
	Port     int    `json:"port"`
	Database string `json:"database"`
}

// SharedURL returns the URL of the database that tests and local runs use:
// TEST_DATABASE_URL, else DATABASE_URL, else the shared private cluster,
// started (and created on first use) under the module root's .local/pg.
func SharedURL(ctx context.Context) (string, error) {
	for _, name := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(name); u != "" {
			return u, nil
		}
	}
	c, err := StartShared(ctx)
	if err != nil {
		return "", err
	}
	return c.URL(""), nil
}

// EnvPort names the variable that chooses the shared cluster's TCP port
// (`make run DB_PORT=5544`); without it a free port is taken at the first
// start and kept.
const EnvPort = "ICHIDO_DB_PORT"

// sharedPort returns the port EnvPort asks for, 0 when it is not set.
func sharedPort() (int, error) {
	v := strings.TrimSpace(os.Getenv(EnvPort))
	if v == "" {
		return 0, nil
	}
	p, err := strconv.Atoi(v)
	if err != nil || p < 1 || p > 65535 {
		return 0, fmt.Errorf("pgtest: %s=%q is not a TCP port (1 to 65535)", EnvPort, v)
	}
	return p, nil
}

// StartShared starts the shared private cluster, creating it on first use,
// and returns it. Concurrent callers (the test binaries of one `go test
// ./...`) serialise on a lock file and share one server. With EnvPort set it
// listens on that port (a stopped cluster moves to it; a running one on
// another port is an error that says how to move it).
func StartShared(ctx context.Context) (*Cluster, error) {
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	port, err := sharedPort()
	if err != nil {
		return nil, err
	}
	home := filepath.Join(root, ".local", "pg")
	if err := os.MkdirAll(home, 0o755); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	unlock, err := lock(filepath.Join(home, "lock"))
	if err != nil {
		return nil, err
	}
	defer unlock()

	statePath := filepath.Join(home, "state.json")
	if st, err := readState(statePath); err == nil {
		c, err := OpenCluster(ctx, st.Dir, st.Port, st.Database)
		if err != nil {
			return nil, err
		}
		if c.Running(ctx) {
			if port != 0 && port != c.Port {
				return nil, fmt.Errorf("pgtest: the private PostgreSQL already runs on port %d, not %d (%s): stop it first (make db-stop)", c.Port, port, EnvPort)
			}
			return c, nil
		}
		if port != 0 && port != c.Port {
			c.Port = port
			if err := writeState(statePath, c); err != nil {
				return nil, err
			}
		}
		if err := c.Start(ctx); err == nil {
			return c, ensureCron(ctx, c)
		}
		// A data directory that cannot start again (left by a crash of the
		// machine, another version) is recreated: it holds test data only.
		_ = c.Destroy()
	}

	dir, err := dataDir(root, home)
	if err != nil {
		return nil, err
	}
	_ = os.RemoveAll(dir)
	c, err := StartCluster(ctx, Options{Dir: dir, Port: port})
	if err != nil {
		return nil, err
	}
	if err := ensureCron(ctx, c); err != nil {
		return nil, err
	}
	if err := writeState(statePath, c); err != nil {
		return nil, err
	}
	return c, nil
}

func writeState(path string, c *Cluster) error {
	b, _ := json.Marshal(state{Dir: c.Dir, Port: c.Port, Database: c.Database})
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// StopShared stops the shared private cluster if it runs. Its data stays
// for the next start.
func StopShared(ctx context.Context) error {
	root, err := ModuleRoot()
	if err != nil {
		return err
	}
	home := filepath.Join(root, ".local", "pg")
	st, err := readState(filepath.Join(home, "state.json"))
	if err != nil {
		return nil // never started
	}
	unlock, err := lock(filepath.Join(home, "lock"))
	if err != nil {
		return err
	}
	defer unlock()
	c, err := OpenCluster(ctx, st.Dir, st.Port, st.Database)
	if err != nil {
		return err
	}
	if !c.Running(ctx) {
		return nil
	}
	return c.Stop(ctx, "fast")
}

// ensureCron creates the pg_cron extension once, in the database where
// pg_cron runs its jobs, so that concurrent migrations never race to create it.
func ensureCron(ctx context.Context, c *Cluster) error {
	conn, err := pgx.Connect(ctx, c.URL(""))
	if err != nil {
		return fmt.Errorf("pgtest: connecting to %s: %w", c.URL(""), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_cron"); err != nil {
		return fmt.Errorf("pgtest: CREATE EXTENSION pg_cron: %w", err)
	}
	return nil
}

// dataDir picks the data directory: .local/pg/data, unless the server's
// user (postgres, when running as root) cannot reach the checkout, in which
// case a directory under the system's temporary directory, named after the
// checkout, is used.
func dataDir(root, home string) (string, error) {
	dir := filepath.Join(home, "data")
	cred, err := serverCredential()
	if err != nil || cred == nil {
		return dir, err
	}
	probe := exec.Command("test", "-w", home)
	probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if probe.Run() == nil {
		return dir, nil
	}
	if err := os.Chown(home, int(cred.Uid), int(cred.Gid)); err == nil {
		probe = exec.Command("test", "-w", home)
		probe.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if probe.Run() == nil {
			return dir, nil
		}
	}
	sum := sha256.Sum256([]byte(root))
	return filepath.Join(os.TempDir(), "ichido-pg-"+hex.EncodeToString(sum[:6])), nil
}

func readState(path string) (state, error) {
	var st state
	b, err := os.ReadFile(path)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(b, &st); err != nil || st.Dir == "" || st.Port == 0 {
		return st, errors.New("pgtest: unreadable state")
	}
	return st, nil
}

func lock(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("pgtest: locking %s: %w", path, err)
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// RootModule is the module path of the repository's top-level go.mod. The
// library (pkg/go.mod) and this package's module (internal/testkit/go.mod)
// are modules of their own below it, with paths that start with this one.
const RootModule = "github.com/ichido/ichido"

// ModuleRoot returns the repository's root, the directory of the top-level
// go.mod (module RootModule exactly, not a nested module of the repository),
// searched upwards from the working directory (go test runs each package in
// its own folder).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if IsModuleRoot(dir) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("pgtest: the project's go.mod (module " + RootModule + ") was not found above the working directory")
		}
		dir = parent
	}
}

// IsModuleRoot reports whether dir holds the repository's top-level go.mod,
// the one whose module line names RootModule itself.
func IsModuleRoot(dir string) bool {
	b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`) == RootModule
		}
	}
	return false
}
