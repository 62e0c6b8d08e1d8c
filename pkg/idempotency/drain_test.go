package idempotency_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

const drainKey = "8e03978e-40d5-43e8-bc93-6894a57f9324"

// syncBuffer is a log destination shared by a server's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// serveMiddleware serves handler behind Middleware with cfg (the user is
// "alice") on a loopback server.
func serveMiddleware(t *testing.T, cfg idempotency.Config, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	cfg.Subject = func(context.Context, idempotency.Request) (string, error) { return "alice", nil }
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = io.Discard
	}
	mw, err := idempotency.Middleware(cfg)
	require.NoError(t, err)
	srv := httptest.NewServer(mw(handler))
	t.Cleanup(srv.Close)
	return srv
}

func post(t *testing.T, url string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", drainKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// TestDrainRefusesNewCallsOnceShutdownBegins: after Shutdown, a protected
// request is answered 503 with Retry-After and its handler does not run.
func TestDrainRefusesNewCallsOnceShutdownBegins(t *testing.T) {
	t.Parallel()
	drain := &idempotency.Drain{}
	ran := false
	srv := serveMiddleware(t, idempotency.Config{Store: memstore.New(), Settings: idempotency.Settings{Drain: drain}},
		func(w http.ResponseWriter, r *http.Request) { ran = true; w.WriteHeader(http.StatusCreated) })
	require.NoError(t, drain.Shutdown(context.Background()), "nothing was in flight")
	resp := post(t, srv.URL)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "1", resp.Header.Get("Retry-After"))
	require.False(t, ran)
}

// TestDrainCutsOffARunAndReleasesItsRecord: a run still in flight when the
// grace period ends is told through its context, whose cause is
// ErrShuttingDown, and its record is released, so that a retry runs.
func TestDrainCutsOffARunAndReleasesItsRecord(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	drain := &idempotency.Drain{}
	started := make(chan struct{})
	cause := make(chan error, 1)
	srv := serveMiddleware(t, idempotency.Config{Store: store, Settings: idempotency.Settings{Drain: drain}},
		func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
			cause <- context.Cause(r.Context())
			w.WriteHeader(http.StatusServiceUnavailable)
		})
	done := make(chan *http.Response)
	go func() { done <- post(t, srv.URL) }()
	<-started

	grace, cancel := context.WithCancel(context.Background())
	cancel() // the grace period is over
	err := drain.Shutdown(grace)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "1 runs were cut off")
	require.ErrorIs(t, <-cause, idempotency.ErrShuttingDown)
	require.Equal(t, http.StatusServiceUnavailable, (<-done).StatusCode)

	recs, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, recs, "the cut-off run's record was released")
}

// TestDrainReleasesTheRecordOfARunThatIgnoresItsContext: a handler that
// does not stop when told still has its record released before Shutdown
// returns.
func TestDrainReleasesTheRecordOfARunThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	drain := &idempotency.Drain{}
	started, stop := make(chan struct{}), make(chan struct{})
	srv := serveMiddleware(t, idempotency.Config{Store: store, Settings: idempotency.Settings{Drain: drain}},
		func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-stop
			w.WriteHeader(http.StatusCreated)
		})
	done := make(chan *http.Response)
	go func() { done <- post(t, srv.URL) }()
	<-started

	grace, cancel := context.WithCancel(context.Background())
	cancel()
	require.Error(t, drain.Shutdown(grace))
	recs, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, recs, "Shutdown released the record itself")
	close(stop)
	<-done
}

// renewSignal is a store that says when a renewal succeeded.
type renewSignal struct {
	idemstore.Store
	once    sync.Once
	renewed chan struct{}
}

func (s *renewSignal) Renew(ctx context.Context, r idemstore.Renewal) error {
	err := s.Store.Renew(ctx, r)
	if err == nil {
		s.once.Do(func() { close(s.renewed) })
	}
	return err
}

// TestHeartbeatFieldMeansRenewed: the log line says "heartbeat" only for a
// run whose lease was renewed, not for one that ended before a renewal, nor
// for a replay.
func TestHeartbeatFieldMeansRenewed(t *testing.T) {
	t.Parallel()
	store := &renewSignal{Store: memstore.New(), renewed: make(chan struct{})}
	logs := &syncBuffer{}
	srv := serveMiddleware(t, idempotency.Config{Store: store, Settings: idempotency.Settings{
		Heartbeat: idempotency.DefaultHeartbeat / 1000, Logger: slog.New(slog.NewJSONHandler(logs, nil)),
	}}, func(w http.ResponseWriter, r *http.Request) {
		<-store.renewed
		w.WriteHeader(http.StatusCreated)
	})
	require.Equal(t, http.StatusCreated, post(t, srv.URL).StatusCode)
	require.Equal(t, http.StatusCreated, post(t, srv.URL).StatusCode) // a replay
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 2)
	var run, replay map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &run))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &replay))
	require.Equal(t, true, run["heartbeat"])
	require.Equal(t, "replayed", replay["outcome"])
	require.NotContains(t, replay, "heartbeat")

	short := &syncBuffer{}
	srv = serveMiddleware(t, idempotency.Config{Store: memstore.New(), Settings: idempotency.Settings{
		Logger: slog.New(slog.NewJSONHandler(short, nil)),
	}}, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) })
	require.Equal(t, http.StatusCreated, post(t, srv.URL).StatusCode)
	require.NotContains(t, short.String(), "heartbeat", "a run that ended before its first renewal")
}

// TestRequireTenant: with Settings.RequireTenant, a request without a
// tenant is refused 401 before the store is consulted, and a function call
// fails with ErrNoTenant.
func TestRequireTenant(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	noTenant := func(context.Context) string { return "" }
	srv := serveMiddleware(t, idempotency.Config{Store: store, Settings: idempotency.Settings{RequireTenant: true, Tenant: noTenant}},
		func(w http.ResponseWriter, r *http.Request) {
			t.Error("the handler ran")
			w.WriteHeader(http.StatusCreated)
		})
	require.Equal(t, http.StatusUnauthorized, post(t, srv.URL).StatusCode)

	fn, err := idempotency.Function(func(context.Context, string) (string, error) { return "ran", nil }, idempotency.FunctionConfig[string]{
		Store: store, Name: "f", Key: func(_ context.Context, in string) (string, error) { return in, nil },
		Settings: idempotency.Settings{RequireTenant: true, Tenant: noTenant, Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard},
	})
	require.NoError(t, err)
	_, err = fn(context.Background(), "k")
	require.True(t, errors.Is(err, idempotency.ErrNoTenant), err)
	recs, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, recs)
}

// TestEMFOnlyInsideLambda: with Settings.Metrics unset, the EMF line goes to
// standard output inside Lambda only.
func TestEMFOnlyInsideLambda(t *testing.T) {
	stdout := func(t *testing.T) string {
		t.Helper()
		r, w, err := os.Pipe()
		require.NoError(t, err)
		saved := os.Stdout
		os.Stdout = w
		h, err := idempotency.Wrap(created, idempotency.Config{Store: memstore.New(), Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler)}})
		os.Stdout = saved
		require.NoError(t, err)
		_, err = h(context.Background(), v2Post("/tasks", "alice", map[string]string{"idempotency-key": drainKey}, `{}`))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		b, err := io.ReadAll(r)
		require.NoError(t, err)
		return string(b)
	}
	t.Run("server", func(t *testing.T) {
		t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "")
		require.Empty(t, stdout(t))
	})
	t.Run("lambda", func(t *testing.T) {
		t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "create-task")
		require.Contains(t, stdout(t), `"_aws"`)
	})
}
