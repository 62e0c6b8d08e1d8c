// Package dynamotest starts private DynamoDB API servers for tests: moto's
// server (moto_server, from the Python package moto with its server extra),
// which speaks DynamoDB's wire protocol on a loopback port with no AWS
// account.
//
// With nothing set, the first call to Endpoint or NewClient in a test
// binary starts one moto_server on a free loopback port, and every test of
// the binary shares it, each with tables of its own (NewTable); Main stops
// it when the binary's tests end. Tests that need a server of their own
// (for example to stop it halfway) call Start. With TEST_DYNAMODB_ENDPOINT
// set, that endpoint is used instead of a private server.
//
// # Serialised requests
//
// DynamoDB applies each write to an item atomically: a conditional write
// sees the item as the last write left it. moto's server runs each request
// on a thread of its own and evaluates a condition and then writes, with
// nothing between the two, so two conditional writes of one item that
// arrive together can both succeed. A private server is therefore reached
// through a front of this package on another loopback port, which passes
// one request at a time to moto (Server.Endpoint); tests that race claims
// then see DynamoDB's behaviour. Server.MotoEndpoint is moto itself.
//
// When moto_server is missing the error says how to install it (pip, from
// PyPI: moto[server]); MOTO_SERVER_BIN overrides where it is looked for.
package dynamotest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// EnvEndpoint names the variable that points the tests at an existing
// DynamoDB endpoint instead of a private server.
const EnvEndpoint = "TEST_DYNAMODB_ENDPOINT"

// EnvBin names the variable that gives the path of moto_server.
const EnvBin = "MOTO_SERVER_BIN"

// InstallHint is the command that installs moto_server.
const InstallHint = "python3 -m pip install 'moto[server]>=5.2' (make deps tries it; or set " + EnvBin + " to moto_server's path)"

// ErrMissing is wrapped by Start's error when moto_server cannot be found.
var ErrMissing = errors.New("dynamotest: moto_server (moto's DynamoDB API server) is not installed")

// Region is the region the clients of this package sign for.
const Region = "us-east-1"

// Server is a running private moto_server behind a front that serialises
// requests.
type Server struct {
	// Endpoint is the URL clients use: the front, one request at a time.
	Endpoint string
	// MotoEndpoint is moto_server's own URL, concurrent requests and all.
	MotoEndpoint string
	// Dir is the server's working directory (its log), removed by Stop.
	Dir string

	requests atomic.Int64
	front    *http.Server
	cmd      *exec.Cmd
	done     chan struct{}
	once     sync.Once
}

// Addr is the front's host:port, for a proxy that sits before it.
func (s *Server) Addr() string { return strings.TrimPrefix(s.Endpoint, "http://") }

// Requests is how many requests the front has passed to moto so far.
func (s *Server) Requests() int64 { return s.requests.Load() }

// Start starts moto_server on a free port of 127.0.0.1, in a new temporary
// directory, and its front on another; the caller stops both with Stop.
func Start(ctx context.Context) (*Server, error) {
	bin, err := FindServer()
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A free port can be taken between FreePort and the server's bind: try
	// again on another.
	for range 3 {
		port, err := pgtest.FreePort()
		if err != nil {
			return nil, err
		}
		s, err := start(ctx, bin, port)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, port int) (*Server, error) {
	dir, err := os.MkdirTemp("", "dynamotest-")
	if err != nil {
		return nil, fmt.Errorf("dynamotest: %w", err)
	}
	logPath := filepath.Join(dir, "moto.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("dynamotest: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// moto reads credentials and region only to sign nothing; keep the
	// developer's own out of its environment.
	cmd.Env = append(scrubbedEnv(), "AWS_ACCESS_KEY_ID=test", "AWS_SECRET_ACCESS_KEY=test", "AWS_DEFAULT_REGION="+Region)
	cmd.SysProcAttr = sysProcAttr()
	s := &Server{MotoEndpoint: "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Dir: dir, cmd: cmd, done: make(chan struct{})}
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
		return nil, fmt.Errorf("dynamotest: starting %s: %w", bin, err)
	}
	if err := s.waitReady(ctx); err != nil {
		log, _ := os.ReadFile(logPath)
		s.Stop()
		return nil, fmt.Errorf("dynamotest: moto_server on port %d did not start: %w\n%s", port, err, log)
	}
	if err := s.startFront(); err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// scrubbedEnv is the environment without AWS settings.
func scrubbedEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AWS_") {
			env = append(env, kv)
		}
	}
	return env
}

// startFront starts the serialising front on a free loopback port.
func (s *Server) startFront() error {
	target, err := url.Parse(s.MotoEndpoint)
	if err != nil {
		return fmt.Errorf("dynamotest: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("dynamotest: %w", err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = &http.Transport{MaxIdleConnsPerHost: 4, IdleConnTimeout: time.Minute}
	var one sync.Mutex
	s.front = &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			one.Lock()
			defer one.Unlock()
			s.requests.Add(1)
			proxy.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	go func() { _ = s.front.Serve(ln) }()
	s.Endpoint = "http://" + ln.Addr().String()
	return nil
}

// waitReady waits until moto answers ListTables.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	c := newClient(s.MotoEndpoint, 1)
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 2*time.Second)
		_, err := c.ListTables(attempt, &dynamodb.ListTablesInput{})
		cancelAttempt()
		if err == nil {
			return nil
		}
		select {
		case <-s.done:
			return errors.New("the server exited")
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Stop stops the front, kills the server, waits for it to exit and removes
// its directory. Calling it again does nothing.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.front != nil {
			_ = s.front.Close()
		}
		_ = s.cmd.Process.Kill()
		<-s.done
		_ = os.RemoveAll(s.Dir)
	})
}

// StartT starts a private server for t alone (see Start), stopped when t
// ends.
func StartT(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

var shared struct {
	mu     sync.Mutex
	server *Server
	err    error
}

// Endpoint returns the endpoint the tests of this binary share:
// TEST_DYNAMODB_ENDPOINT when set, else a private server's front, started
// on first use and stopped by Main. It fails t when no server can be had.
func Endpoint(t testing.TB) string {
	t.Helper()
	e, err := SharedEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// SharedEndpoint is Endpoint for code that has no testing.TB (a TestMain).
func SharedEndpoint() (string, error) {
	if e := os.Getenv(EnvEndpoint); e != "" {
		return e, nil
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server == nil && shared.err == nil {
		shared.server, shared.err = Start(context.Background())
	}
	if shared.err != nil {
		return "", shared.err
	}
	return shared.server.Endpoint, nil
}

// Main runs the tests of a binary and then stops the shared server, if one
// was started. Use it as the package's TestMain.
func Main(m *testing.M) {
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// StopShared stops the shared server of this binary if it was started. A
// later Endpoint call starts a new one.
func StopShared() {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.server != nil {
		shared.server.Stop()
	}
	shared.server, shared.err = nil, nil
}

// ClientOptions adjusts a client of NewClientAt.
type ClientOptions struct {
	// MaxAttempts is how many times the SDK sends one request (1: no retry).
	// Defaults to 3, the SDK's default.
	MaxAttempts int
	// HTTPClient sends the requests. Defaults to the SDK's own.
	HTTPClient aws.HTTPClient
}

// NewClient returns a client on the shared endpoint (see Endpoint).
func NewClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	return NewClientAt(Endpoint(t), ClientOptions{})
}

// NewClientAt returns a client on endpoint with static test credentials,
// signing for Region.
func NewClientAt(endpoint string, opts ClientOptions) *dynamodb.Client {
	attempts := opts.MaxAttempts
	if attempts <= 0 {
		attempts = 3
	}
	return dynamodb.New(dynamodb.Options{
		Region:           Region,
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: attempts,
		HTTPClient:       opts.HTTPClient,
	})
}

func newClient(endpoint string, attempts int) *dynamodb.Client {
	return NewClientAt(endpoint, ClientOptions{MaxAttempts: attempts})
}

var tableSeq atomic.Int64

// TableName returns a table name no other test of this binary uses,
// derived from t's name (DynamoDB's rules: 3 to 255 of [A-Za-z0-9_.-]).
func TableName(t testing.TB) string {
	var b strings.Builder
	for _, r := range t.Name() {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('_')
		}
	}
	name := b.String()
	if len(name) > 200 {
		name = name[:200]
	}
	return fmt.Sprintf("%s-%d-%d", name, os.Getpid(), tableSeq.Add(1))
}

// CreateTable creates the table in (its TableName set, or a new one from
// TableName when empty), waits until it is active and deletes it when t
// ends. It returns the table's name.
func CreateTable(t testing.TB, client *dynamodb.Client, in *dynamodb.CreateTableInput) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if aws.ToString(in.TableName) == "" {
		in.TableName = aws.String(TableName(t))
	}
	name := aws.ToString(in.TableName)
	if _, err := client.CreateTable(ctx, in); err != nil {
		t.Fatalf("dynamotest: creating table %s: %v", name, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) { o.MinDelay = 50 * time.Millisecond })
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, 20*time.Second); err != nil {
		t.Fatalf("dynamotest: table %s never became active: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		var missing *types.ResourceNotFoundException
		if _, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil && !errors.As(err, &missing) {
			t.Errorf("dynamotest: deleting table %s: %v", name, err)
		}
	})
	return name
}

// FindServer returns the path of moto_server: MOTO_SERVER_BIN, else
// moto_server on PATH, else one of pyenv's Pythons, else one in the
// repository's .local/pytools (where make deps installs Python tools when
// the system's Python refuses pip).
func FindServer() (string, error) {
	if bin := os.Getenv(EnvBin); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("%w: %s=%s: %v", ErrMissing, EnvBin, bin, err)
		}
		return bin, nil
	}
	if p, err := exec.LookPath("moto_server"); err == nil {
		return p, nil
	}
	var candidates []string
	if home, err := os.UserHomeDir(); err == nil {
		root := os.Getenv("PYENV_ROOT")
		if root == "" {
			root = filepath.Join(home, ".pyenv")
		}
		m, _ := filepath.Glob(filepath.Join(root, "versions", "*", "bin", "moto_server"))
		candidates = append(candidates, m...)
	}
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			candidates = append(candidates, filepath.Join(d, ".local", "pytools", "bin", "moto_server"))
			// Up to the repository's root (.local is there), past the
			// go.mod of a nested module (pkg/, internal/testkit/).
			if pgtest.IsModuleRoot(d) || filepath.Dir(d) == d {
				break
			}
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, nil
		}
	}
	return "", fmt.Errorf("%w: install it with %s, or set %s to a DynamoDB endpoint", ErrMissing, InstallHint, EnvEndpoint)
}

// Version returns moto's version, read through the Python interpreter that
// runs moto_server (its script's first line), or an error when it cannot be
// told.
func Version() (string, error) {
	bin, err := FindServer()
	if err != nil {
		return "", err
	}
	if resolved, err := exec.Command("pyenv", "which", "moto_server").Output(); err == nil && strings.Contains(bin, "shims") {
		bin = strings.TrimSpace(string(resolved))
	}
	f, err := os.Open(bin)
	if err != nil {
		return "", err
	}
	defer f.Close()
	line, _ := bufio.NewReader(f).ReadString('\n')
	python, ok := strings.CutPrefix(strings.TrimSpace(line), "#!")
	if !ok || !strings.Contains(python, "python") {
		return "", fmt.Errorf("dynamotest: %s is not a Python script", bin)
	}
	args := strings.Fields(python)
	out, err := exec.Command(args[0], append(args[1:], "-c", "import moto; print(moto.__version__)")...).Output()
	if err != nil {
		return "", fmt.Errorf("dynamotest: reading moto's version: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}
