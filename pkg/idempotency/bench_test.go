package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
)

// The benchmarks measure the decorator's own cost on an in-memory store
// (what a real store adds is measured by make bench): a first request that
// claims and completes, and a replay.

func benchConfig() idempotency.Config {
	return idempotency.Config{Store: newMemStore(), Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}}
}

func benchRequest(key string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RawPath: "/tasks",
		Headers: map[string]string{"idempotency-key": key, "content-type": "application/json"},
		Body:    `{"title":"Write the deploy guide","due_date":"2026-12-31"}`,
	}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"}},
	}
	return req
}

// BenchmarkWrapFirstRequest is a first request with a deadline, as every
// Lambda invocation has: the lease runs to the deadline and no heartbeat
// starts.
func BenchmarkWrapFirstRequest(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	benchFirstRequest(b, ctx)
}

// BenchmarkWrapFirstRequestHeartbeat is a first request without a
// deadline, as net/http serves one: its lease is renewed by a heartbeat.
func BenchmarkWrapFirstRequestHeartbeat(b *testing.B) {
	benchFirstRequest(b, context.Background())
}

func benchFirstRequest(b *testing.B, ctx context.Context) {
	h, err := idempotency.Wrap(v2Handler(created), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]events.APIGatewayV2HTTPRequest, b.N)
	for i := range reqs {
		reqs[i] = benchRequest(uuid.NewString())
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := h(ctx, reqs[i]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkWrapReplay(b *testing.B) {
	h, err := idempotency.Wrap(v2Handler(created), benchConfig())
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequest(uuid.NewString())
	if _, err := h(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := h(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkFunctionReplay(b *testing.B) {
	f, err := idempotency.Function(func(_ context.Context, id string) (map[string]string, error) {
		return map[string]string{"id": id, "status": "done"}, nil
	}, idempotency.FunctionConfig[string]{
		Store: newMemStore(), Name: "bench",
		Key: func(_ context.Context, id string) (string, error) { return id, nil },
		Settings: idempotency.Settings{
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard,
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	if _, err := f(context.Background(), "task-1"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := f(context.Background(), "task-1"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSQSBatch is a batch of 10 new records, per batch.
func BenchmarkSQSBatch(b *testing.B) {
	h, err := idempotency.SQSHandler(func(context.Context, events.SQSMessage) error { return nil },
		idempotency.FunctionConfig[events.SQSMessage]{Store: newMemStore(), Name: "bench",
			Settings: idempotency.Settings{
				Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard,
			},
		})
	if err != nil {
		b.Fatal(err)
	}
	batches := make([]events.SQSEvent, b.N)
	for i := range batches {
		for range 10 {
			batches[i].Records = append(batches[i].Records, events.SQSMessage{MessageId: uuid.NewString(), Body: `{"event_id":"e"}`})
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := h(context.Background(), batches[i]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWrapReplayCached is a replay answered from the local cache: no
// store call at all, the decorator's own cost alone.
func BenchmarkWrapReplayCached(b *testing.B) {
	benchReplayCached(b, benchConfig())
}

// BenchmarkWrapReplayCachedQuiet is BenchmarkWrapReplayCached with the
// logger's level above Info, so that no log line is written: the
// difference between the two is the JSON log line's cost.
func BenchmarkWrapReplayCachedQuiet(b *testing.B) {
	cfg := benchConfig()
	cfg.Logger = slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError}))
	benchReplayCached(b, cfg)
}

func benchReplayCached(b *testing.B, cfg idempotency.Config) {
	cfg.LocalCache = &idempotency.LocalCache{}
	h, err := idempotency.Wrap(v2Handler(created), cfg)
	if err != nil {
		b.Fatal(err)
	}
	req := benchRequest(uuid.NewString())
	if _, err := h(context.Background(), req); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if _, err := h(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkMiddlewareReplay is a replay of a typical API call through
// Middleware: a small JSON body and the headers a client and a load balancer
// send, answered from memstore.
func BenchmarkMiddlewareReplay(b *testing.B) {
	mw, err := idempotency.Middleware(idempotency.Config{
		Store:    newMemStore(),
		Subject:  idempotency.ContextSubject(func(context.Context) string { return "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01" }),
		Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))},
	})
	if err != nil {
		b.Fatal(err)
	}
	const answer = `{"id":"0b5f3b4e-8c1d-4c1e-9d4a-6f3e2c1b0a99","title":"Write the deploy guide","status":"open"}`
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Location", "/tasks/0b5f3b4e-8c1d-4c1e-9d4a-6f3e2c1b0a99")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, answer)
	}))
	const body = `{"title":"Write the deploy guide","due_date":"2026-12-31"}`
	r := httptest.NewRequest(http.MethodPost, "/tasks", nil)
	for name, value := range map[string]string{
		"Idempotency-Key": uuid.NewString(), "Content-Type": "application/json", "Accept": "application/json",
		"Accept-Encoding": "gzip, deflate, br", "User-Agent": "task-client/2.3 (go1.26)", "Authorization": "Bearer eyJhbGciOiJFUzI1NiJ9.e30.c2ln",
		"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https", "Traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
	} {
		r.Header.Set(name, value)
	}
	rb, raw := &reusableBody{}, []byte(body)
	r.Body = rb
	w := &discardWriter{h: http.Header{}}
	rb.Reset(raw)
	h.ServeHTTP(w, r)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		rb.Reset(raw)
		clear(w.h)
		w.n = 0
		h.ServeHTTP(w, r)
		if w.status != http.StatusCreated || w.n != len(answer) || w.h.Get(idempotency.ReplayedHeader) != "true" {
			b.Fatalf("status %d, %d bytes, replayed %q", w.status, w.n, w.h.Get(idempotency.ReplayedHeader))
		}
	}
}
