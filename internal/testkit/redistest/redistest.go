// Package redistest starts private Redis servers for tests.
//
// With nothing set, the first call to URL or NewClient in a test binary
// starts one redis-server on a free loopback port, in a temporary
// directory, with persistence off (--save "" --appendonly no), and every
// test of the binary shares it; Main stops it when the binary's tests end.
// Tests that need a server of their own (for example to stop it halfway)
// call Start. With TEST_REDIS_URL set, that server is used instead of a
// private one.
//
// When redis-server is missing it is installed through apt (package
// redis-server) when running as root; otherwise the error names the package
// to install.
//
// A test package that shares the server stops it at the end with:
//
//	func TestMain(m *testing.M) { redistest.Main(m) }
package redistest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// Package is the Debian package that provides redis-server.
const Package = "redis-server"

// EnvURL names the variable that points the tests at an existing server
// instead of a private one.
const EnvURL = "TEST_REDIS_URL"

// Server is a running private redis-server.
type Server struct {
	// Addr is the server's host:port on 127.0.0.1.
	Addr string
	// Dir is the server's working directory, removed by Stop.
	Dir string

	cmd  *exec.Cmd
	done chan struct{}
	once sync.Once
}

// URL returns the server's redis:// URL.
func (s *Server) URL() string { return "redis://" + s.Addr }

// Start starts a private redis-server on a free port of 127.0.0.1, in a new
// temporary directory, persistence off; extraArgs are added to its command
// line (for example "--cluster-enabled", "yes"). The caller stops it with
// Stop.
func Start(ctx context.Context, extraArgs ...string) (*Server, error) {
	bin, err := EnsureInstalled(ctx)
	if err != nil {
		return nil, err
	}
	return startBin(ctx, bin, extraArgs)
}

// startBin starts the server binary bin as Start does.
func startBin(ctx context.Context, bin string, extraArgs []string) (*Server, error) {
	var lastErr error
	// A free port can be taken between FreePort and the server's bind: try
	// again on another.
	for range 3 {
		port, err := pgtest.FreePort()
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, bin, port, extraArgs)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, port int, extraArgs []string) (*Server, error) {
	dir, err := os.MkdirTemp("", "redistest-")
	if err != nil {
		return nil, fmt.Errorf("redistest: %w", err)
	}
	logPath := filepath.Join(dir, "redis.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: %w", err)
	}
	defer logFile.Close()
	args := append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", dir,
		"--daemonize", "no",
		"--protected-mode", "yes",
		"--loglevel", "warning",
	}, extraArgs...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that started the
		// child, so that thread stays ours until the server exits.
		runtime.LockOSThread()
		err := cmd.Start()
		started <- err
		if err == nil {
			_ = cmd.Wait()
		}
		close(s.done)
	}()
	if err := <-started; err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("redistest: starting %s: %w", bin, err)
	}
	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		log, _ := os.ReadFile(logPath)
		return nil, fmt.Errorf("redistest: %s on %s did not start: %w\n%s", filepath.Base(bin), s.Addr, err, log)
	}
	return s, nil
}

// waitReady waits until the server answers PING.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for {
		if err := ping(ctx, s.Addr); err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("the server exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func ping(ctx context.Context, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := conn.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	// A server started with --requirepass answers NOAUTH: it is up too.
	if !strings.HasPrefix(line, "+PONG") && !strings.HasPrefix(line, "-NOAUTH") {
		return fmt.Errorf("unexpected reply %q", strings.TrimSpace(line))
	}
	return nil
}

// Stop kills the server, waits for it to exit and removes its directory.
// Calling it again does nothing.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
		_ = os.RemoveAll(s.Dir)
	})
}

// StartT starts a private server for t alone (see Start), stopped when t
// ends.
func StartT(t testing.TB, extraArgs ...string) *Server {
	t.Helper()
	s, err := Start(context.Background(), extraArgs...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// sharedServer is a server that the tests of a binary share, started on
// first use.
type sharedServer struct {
	mu     sync.Mutex
	server *Server
	err    error
}

// url returns the shared server's URL, starting it with start on first use.
func (s *sharedServer) url(start func(context.Context, ...string) (*Server, error)) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server == nil && s.err == nil {
		s.server, s.err = start(context.Background())
	}
	if s.err != nil {
		return "", s.err
	}
	return s.server.URL(), nil
}

// stop stops the shared server if it was started; a later url starts a new
// one.
func (s *sharedServer) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.server != nil {
		s.server.Stop()
	}
	s.server, s.err = nil, nil
}

var shared sharedServer

// URL returns the URL of the server the tests of this binary share:
// TEST_REDIS_URL when set, else a private server started on first use and
// stopped by Main. It fails t when no server can be had.
func URL(t testing.TB) string {
	t.Helper()
	u, err := SharedURL()
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// SharedURL is URL for code that has no testing.TB (a TestMain).
func SharedURL() (string, error) {
	if u := os.Getenv(EnvURL); u != "" {
		return u, nil
	}
	return shared.url(Start)
}

// NewClient returns a client on the shared server (see URL), closed when t
// ends. Tests share the server: each uses keys of its own (random ids or a
// prefix), and none flushes the database.
func NewClient(t testing.TB) *redis.Client {
	t.Helper()
	return clientAt(t, URL(t), EnvURL)
}

// clientAt returns a client on url, which env may have given, closed when t
// ends.
func clientAt(t testing.TB, url, env string) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("redistest: %s: %v", env, err)
	}
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Main runs the tests of a binary and then stops the shared server, if one
// was started. Use it as the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared servers of this binary (Redis and Valkey)
// that were started. A later URL or ValkeyURL call starts a new one.
func StopShared() {
	shared.stop()
	sharedValkey.stop()
}

// EnsureInstalled returns the path of redis-server, installing the package
// through apt first when it is missing and the caller is root.
// REDIS_SERVER_BIN overrides the path.
func EnsureInstalled(ctx context.Context) (string, error) {
	if bin, ok := findServer(); ok {
		return bin, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("redistest: redis-server is needed: install it with 'sudo apt-get install %s' (or set %s to a server's URL)", Package, EnvURL)
	}
	if err := pgtest.AptInstall(ctx, Package); err != nil {
		return "", err
	}
	// Debian's package starts a service of its own where an init system
	// runs; the tests start private servers instead.
	_ = exec.CommandContext(ctx, "service", "redis-server", "stop").Run()
	bin, ok := findServer()
	if !ok {
		return "", fmt.Errorf("redistest: %s installed, but redis-server is still missing", Package)
	}
	return bin, nil
}

func findServer() (string, bool) {
	if bin := os.Getenv("REDIS_SERVER_BIN"); bin != "" {
		_, err := os.Stat(bin)
		return bin, err == nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, true
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, true
		}
	}
	return "", false
}
