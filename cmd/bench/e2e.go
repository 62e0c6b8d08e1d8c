package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/idempotency"
)

// EndToEndResult is POST /tasks over HTTP through the local API gateway:
// the create handler wrapped by the decorator (as package taskfn builds it)
// against the same handler unwrapped, and replays of one key.
type EndToEndResult struct {
	Clients int `json:"clients"`
	// PoolConns is the size of the database pool both handlers share.
	PoolConns int `json:"pool_conns"`
	// Sides: "unwrapped", "wrapped (first request)", "wrapped (replay)".
	Sides []Side `json:"sides"`
}

const e2ePoolConns = 8

func (b *bench) endToEnd(ctx context.Context) error {
	cfg := b.cfg
	res := &EndToEndResult{Clients: cfg.e2eClients, PoolConns: e2ePoolConns}
	b.res.EndToEnd = res

	// The wrapped handler is the one the functions deploy: taskfn.Build,
	// with its log and metric lines (written to standard output in Lambda)
	// sent to /dev/null.
	env := map[string]string{
		"DB_AUTH":      "url",
		"DATABASE_URL": b.db.url,
		"DB_MAX_CONNS": strconv.Itoa(e2ePoolConns),
	}
	stdout := os.Stdout
	os.Stdout = b.devnull
	fns, err := taskfn.Build(ctx, func(k string) string { return env[k] })
	os.Stdout = stdout
	if err != nil {
		return err
	}
	defer fns.Close()
	wrapped, ok := fns.Handler(taskfn.CreateTaskFunction)
	if !ok {
		return errors.New("taskfn has no " + taskfn.CreateTaskFunction)
	}
	// The same handler unwrapped, on the same pool.
	api := tasks.NewAPI(tasks.NewService(fns.Pool()), &tasks.Options{Logger: slog.New(slog.NewJSONHandler(b.devnull, nil))})

	wrappedURL, stopW, err := serveGateway(ctx, wrapped)
	if err != nil {
		return err
	}
	defer stopW()
	unwrappedURL, stopU, err := serveGateway(ctx, api.Create)
	if err != nil {
		return err
	}
	defer stopU()

	client := &http.Client{
		Transport: &http.Transport{MaxIdleConns: 4 * cfg.e2eClients, MaxIdleConnsPerHost: 2 * cfg.e2eClients, IdleConnTimeout: time.Minute},
		Timeout:   30 * time.Second,
	}
	defer client.CloseIdleConnections()
	// One user, and so one token, per client.
	tokens := make([]string, cfg.e2eClients)
	replayKeys := make([]string, cfg.e2eClients)
	for i := range tokens {
		if tokens[i], err = localapi.NewToken(localapi.TokenOptions{Subject: uuid.NewString()}); err != nil {
			return err
		}
		replayKeys[i] = uuid.NewString()
		if _, err := post(ctx, client, wrappedURL, tokens[i], replayKeys[i], false); err != nil {
			return fmt.Errorf("first request of a replayed key: %w", err)
		}
	}
	specs := []sideSpec{
		{"unwrapped", func(ctx context.Context, w int) (time.Duration, error) {
			return post(ctx, client, unwrappedURL, tokens[w], uuid.NewString(), false)
		}},
		{"wrapped (first request)", func(ctx context.Context, w int) (time.Duration, error) {
			return post(ctx, client, wrappedURL, tokens[w], uuid.NewString(), false)
		}},
		{"wrapped (replay)", func(ctx context.Context, w int) (time.Duration, error) {
			return post(ctx, client, wrappedURL, tokens[w], replayKeys[w], true)
		}},
	}
	p := plan{reps: cfg.reps, clients: cfg.e2eClients, dur: cfg.e2eDur, maxOps: cfg.maxOps, warm: cfg.warm}
	if res.Sides, err = compare(ctx, p, specs); err != nil {
		return err
	}
	logSides("POST /tasks", res.Sides)
	return nil
}

// serveGateway serves POST /tasks → h through the local API gateway on a
// loopback port and returns the endpoint's URL.
func serveGateway(ctx context.Context, h handler) (string, func(), error) {
	gw, err := localapi.New(localapi.Config{
		Routes:    []localapi.Route{{Method: http.MethodPost, Path: "/tasks", Function: taskfn.CreateTaskFunction}},
		Handlers:  map[string]localapi.Handler{taskfn.CreateTaskFunction: h},
		AccessLog: io.Discard,
		Logger:    slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return "", nil, err
	}
	ln, err := localapi.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	stop := func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	return "http://" + ln.Addr().(*net.TCPAddr).String() + "/tasks", stop, nil
}

// post creates a task and checks that the answer is a 201, replayed or not
// as expected.
func post(ctx context.Context, client *http.Client, url, token, key string, replayed bool) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(taskBody))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if resp.StatusCode != http.StatusCreated {
		return d, fmt.Errorf("status %d: %.200s", resp.StatusCode, body)
	}
	if got := resp.Header.Get(idempotency.ReplayedHeader) == "true"; got != replayed {
		return d, fmt.Errorf("replayed header %v, want %v", got, replayed)
	}
	return d, nil
}
