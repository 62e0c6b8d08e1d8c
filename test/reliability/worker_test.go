package reliability

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// A worker is this test binary started again as a separate process (an
// execution environment with its own pool) that serves the task API through
// the local API Gateway on a loopback port. Its settings come from the
// environment:
//
//   - ICHIDO_RELIABILITY_WORKER: "taskfn" builds the functions exactly as
//     the Lambda mains do (taskfn.Build from DB_AUTH=url, DATABASE_URL,
//     DB_MAX_CONNS, LOG_LEVEL); "spy" builds the same parts by hand
//     (dbpool, pgstore, tasks, idempotency.Wrap) with a spy inside the
//     decorator that counts every run of a protected handler, and the
//     settings below.
//   - ICHIDO_RELIABILITY_MAX_LEASE: Config.MaxLease of the spy (a Go
//     duration). Defaults to the package default.
//   - ICHIDO_RELIABILITY_BLOCK: "before" makes the spy's create handler
//     block forever after the claim and before the task is inserted,
//     "after" after the task is inserted and before the key is completed:
//     a worker to be killed.
//   - ICHIDO_RELIABILITY_TIMEOUT: the gateway's function timeout.
//   - ICHIDO_RELIABILITY_WORKER=nethttp serves the task API's create as a
//     plain net/http server behind idempotency.Middleware instead (the spy
//     and ICHIDO_RELIABILITY_BLOCK as above), with
//     ICHIDO_RELIABILITY_HEARTBEAT as Config.Heartbeat ("off" for
//     HeartbeatOff) and ICHIDO_RELIABILITY_MAX_LEASE as Config.MaxLease.
//
// It prints "READY <host:port>" once it serves, and GET /__reliability/stats
// answers with its run counts and memory (workerStats). It stops on SIGTERM
// or when its standard input closes (the test process went away).
const (
	modeTaskfn  = "taskfn"
	modeSpy     = "spy"
	modeNetHTTP = "nethttp"

	envMaxLease  = "ICHIDO_RELIABILITY_MAX_LEASE"
	envBlock     = "ICHIDO_RELIABILITY_BLOCK"
	envTimeout   = "ICHIDO_RELIABILITY_TIMEOUT"
	envHeartbeat = "ICHIDO_RELIABILITY_HEARTBEAT"

	statsPath = "/__reliability/stats"
	readyLine = "READY "
)

// workerStats is what a worker reports about itself.
type workerStats struct {
	PID int `json:"pid"`
	// Runs counts the runs of protected handlers by "METHOD key" (spy only).
	Runs      map[string]int `json:"runs"`
	HeapAlloc uint64         `json:"heap_alloc"`
	HeapInuse uint64         `json:"heap_inuse"`
	Sys       uint64         `json:"sys"`
	RSS       uint64         `json:"rss"`
	// PeakRSS is the process's resident set high-water mark (VmHWM).
	PeakRSS    uint64 `json:"peak_rss"`
	Goroutines int    `json:"goroutines"`
}

// runCounter counts handler runs inside the decorator.
type runCounter struct {
	mu   sync.Mutex
	runs map[string]int
}

func (c *runCounter) add(method, key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.runs == nil {
		c.runs = map[string]int{}
	}
	c.runs[method+" "+key]++
}

func (c *runCounter) snapshot() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.runs))
	for k, v := range c.runs {
		out[k] = v
	}
	return out
}

// wiring configures the hand-built functions of a spy worker (and of the
// in-process fuzz target).
type wiring struct {
	maxLease time.Duration
	block    string // "", "before" or "after"
	runs     *runCounter
	logger   *slog.Logger
}

// wire builds the task API's handlers on pool the way taskfn.Build does,
// with a spy between the decorator and each protected handler.
func wire(pool *pgxpool.Pool, w wiring) (map[string]localapi.Handler, error) {
	if w.logger == nil {
		w.logger = slog.New(slog.NewJSONHandler(io.Discard, nil))
	}
	api := tasks.NewAPI(tasks.NewService(pool), &tasks.Options{Logger: w.logger})
	store := must.Value(pgstore.New(pool, nil))
	protect := func(h taskfn.Handler, block string) (taskfn.Handler, error) {
		spied := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			if info, ok := idempotency.FromContext(ctx); ok && w.runs != nil {
				w.runs.add(req.RequestContext.HTTP.Method, info.Key)
			}
			if block == "before" {
				select {} // claimed, never finishes: the process is killed
			}
			resp, err := h(ctx, req)
			if block == "after" {
				select {} // the task is inserted, the key never completed
			}
			return resp, err
		}
		return idempotency.Wrap(spied, idempotency.Config{
			Store: store,
			Settings: idempotency.Settings{
				MaxLease: w.maxLease,
				Logger:   w.logger,
				Metrics:  io.Discard,
			},
		})
	}
	create, err1 := protect(api.Create, w.block)
	update, err2 := protect(api.Update, "")
	remove, err3 := protect(api.Delete, "")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	return map[string]localapi.Handler{
		taskfn.CreateTaskFunction: localapi.Handler(create),
		taskfn.ListTasksFunction:  localapi.Handler(api.List),
		taskfn.GetTaskFunction:    localapi.Handler(api.Get),
		taskfn.UpdateTaskFunction: localapi.Handler(update),
		taskfn.DeleteTaskFunction: localapi.Handler(remove),
	}, nil
}

// templateRoutes reads the routes of template.yaml, as the local server does.
func templateRoutes() ([]localapi.Route, error) {
	tpl, err := samtemplate.Load("../../template.yaml")
	if err != nil {
		return nil, err
	}
	var routes []localapi.Route
	for _, r := range tpl.Routes() {
		routes = append(routes, localapi.Route{Method: r.Method, Path: r.Path, Function: r.Function})
	}
	return routes, nil
}

// workerMain is the whole life of a worker process; it returns the exit code.
func workerMain() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop()
	}()
	if err := serveWorker(ctx, os.Getenv(envWorker)); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

func serveWorker(ctx context.Context, mode string) error {
	runs := &runCounter{}
	var handlers map[string]localapi.Handler
	var direct http.Handler // the nethttp worker's server, in place of the gateway
	switch mode {
	case modeTaskfn:
		fns, err := taskfn.Build(ctx, os.Getenv)
		if err != nil {
			return err
		}
		defer fns.Close()
		handlers = map[string]localapi.Handler{}
		for _, id := range taskfn.LogicalIDs() {
			h, _ := fns.Handler(id)
			handlers[id] = localapi.Handler(h)
		}
	case modeSpy:
		cfg, err := dbpool.ConfigFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		pool, err := dbpool.New(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		var maxLease time.Duration
		if s := os.Getenv(envMaxLease); s != "" {
			if maxLease, err = time.ParseDuration(s); err != nil {
				return fmt.Errorf("%s: %w", envMaxLease, err)
			}
		}
		handlers, err = wire(pool, wiring{maxLease: maxLease, block: os.Getenv(envBlock), runs: runs})
		if err != nil {
			return err
		}
	case modeNetHTTP:
		cfg, err := dbpool.ConfigFromEnv(os.Getenv)
		if err != nil {
			return err
		}
		pool, err := dbpool.New(ctx, cfg)
		if err != nil {
			return err
		}
		defer pool.Close()
		if direct, err = netHTTPServer(pool, runs); err != nil {
			return err
		}
	default:
		return fmt.Errorf("%s is %q: use %q, %q or %q", envWorker, mode, modeTaskfn, modeSpy, modeNetHTTP)
	}

	if direct == nil {
		gw, err := gateway(handlers)
		if err != nil {
			return err
		}
		direct = gw
	}
	mux := http.NewServeMux()
	mux.Handle("/", direct)
	mux.HandleFunc("GET "+statsPath, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("gc") == "1" {
			runtime.GC()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(currentStats(runs))
	})

	ln, err := localapi.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }()
	fmt.Fprintf(os.Stdout, "%s%s\n", readyLine, ln.Addr())
	select {
	case <-ctx.Done():
	case err := <-serveErr:
		return err
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// gateway is the local API Gateway over handlers, with the routes of
// template.yaml and ICHIDO_RELIABILITY_TIMEOUT as the function timeout.
func gateway(handlers map[string]localapi.Handler) (http.Handler, error) {
	routes, err := templateRoutes()
	if err != nil {
		return nil, err
	}
	var timeout time.Duration
	if s := os.Getenv(envTimeout); s != "" {
		if timeout, err = time.ParseDuration(s); err != nil {
			return nil, fmt.Errorf("%s: %w", envTimeout, err)
		}
	}
	return localapi.New(localapi.Config{
		Routes:   routes,
		Handlers: handlers,
		Timeout:  timeout,
		Logger:   slog.New(slog.NewJSONHandler(os.Stderr, nil)),
	})
}

// currentStats reads this process's run counts and memory.
func currentStats(runs *runCounter) workerStats {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return workerStats{
		PID:        os.Getpid(),
		Runs:       runs.snapshot(),
		HeapAlloc:  m.HeapAlloc,
		HeapInuse:  m.HeapInuse,
		Sys:        m.Sys,
		RSS:        readStatus("VmRSS"),
		PeakRSS:    readStatus("VmHWM"),
		Goroutines: runtime.NumGoroutine(),
	}
}

// readStatus returns a size field of this process's /proc status (VmRSS,
// the resident set; VmHWM, its high-water mark) in bytes, or 0 where there
// is no /proc.
func readStatus(field string) uint64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}

// worker is the test's handle on a worker process.
type worker struct {
	// URL is the worker's base URL, http://127.0.0.1:port.
	URL  string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *tailBuffer
	done chan struct{}
}

// workerEnv returns a local run's environment on the database at url.
func workerEnv(url string, extra map[string]string) map[string]string {
	env := map[string]string{
		"DB_AUTH":      "url",
		"DATABASE_URL": url,
		"DB_MAX_CONNS": "2",
		"LOG_LEVEL":    "error",
	}
	for k, v := range extra {
		env[k] = v
	}
	return env
}

// startWorker starts a worker process and waits until it serves. It is
// stopped when the test ends; on failure the tail of its output is logged.
func startWorker(t testing.TB, mode string, env map[string]string) *worker {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envWorker+"="+mode)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	w := &worker{cmd: cmd, in: in, out: &tailBuffer{max: 8 << 10}, done: make(chan struct{})}
	cmd.Stderr = w.out
	require.NoError(t, cmd.Start())

	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		announced := false
		for sc.Scan() {
			line := sc.Text()
			if !announced {
				if addr, ok := strings.CutPrefix(line, readyLine); ok {
					announced = true
					ready <- addr
					continue
				}
			}
			_, _ = w.out.Write(append([]byte(line), '\n'))
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	go func() {
		_ = cmd.Wait()
		close(w.done)
	}()
	t.Cleanup(func() {
		w.stop()
		if t.Failed() {
			t.Logf("worker %d output (tail):\n%s", cmd.Process.Pid, w.out.String())
		}
	})
	select {
	case addr := <-ready:
		w.URL = "http://" + addr
	case <-w.done:
		t.Fatalf("worker exited before serving:\n%s", w.out.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("worker did not serve within 60s:\n%s", w.out.String())
	}
	return w
}

// stop ends the worker: SIGTERM, then SIGKILL after 5 seconds.
func (w *worker) stop() {
	select {
	case <-w.done:
		return
	default:
	}
	_ = w.in.Close()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(5 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.done
	}
}

// kill ends the worker with SIGKILL, as a crashed execution environment
// ends, and waits until it is gone.
func (w *worker) kill(t testing.TB) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
	select {
	case <-w.done:
	case <-time.After(10 * time.Second):
		t.Fatal("worker still alive 10s after SIGKILL")
	}
	require.Equal(t, "signal: killed", w.cmd.ProcessState.String())
}

// stats asks the worker for its stats; gc runs a garbage collection first.
func (w *worker) stats(t testing.TB, gc bool) workerStats {
	t.Helper()
	u := w.URL + statsPath
	if gc {
		u += "?gc=1"
	}
	resp, err := httpClient.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var s workerStats
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&s))
	return s
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.b.Write(p)
	if over := b.b.Len() - b.max; over > 0 {
		b.b.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
