package idempotency_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
)

// The shape benchmarks measure what the net/http shape (Middleware) and the
// Function shape cost per request on the in-memory store: a first request
// (claim, run, complete) and a replay, for a 1 KiB JSON body and a 64 KiB
// binary (not UTF-8) body, request and response alike.

// shapeJSON is a JSON object of about n bytes.
func shapeJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"title":"Write the deploy guide","items":[`)
	for i := 0; b.Len() < n-40; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"n":%d,"label":"item-%04d"}`, i, i)
	}
	b.WriteString(`],"due_date":"2026-12-31"}`)
	return []byte(b.String())
}

// shapeBinary is n random bytes that are not valid UTF-8.
func shapeBinary(n int) []byte {
	r := rand.New(rand.NewPCG(1, 2))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	b[0] = 0xff
	if utf8.Valid(b) {
		panic("binary body is UTF-8")
	}
	return b
}

// discardWriter is an http.ResponseWriter that keeps nothing; its header
// map is cleared and reused between requests.
type discardWriter struct {
	h      http.Header
	status int
	n      int
}

func (w *discardWriter) Header() http.Header    { return w.h }
func (w *discardWriter) WriteHeader(status int) { w.status = status }
func (w *discardWriter) Write(p []byte) (int, error) {
	w.n += len(p)
	return len(p), nil
}
func (w *discardWriter) WriteString(s string) (int, error) {
	w.n += len(s)
	return len(s), nil
}

// reusableBody is a request body that can be rewound without allocating.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

type shapeCase struct {
	name        string
	contentType string
	req, resp   []byte
}

func shapeCases() []shapeCase {
	return []shapeCase{
		{"json1KiB", "application/json", shapeJSON(1 << 10), shapeJSON(1 << 10)},
		{"binary64KiB", "application/octet-stream", shapeBinary(64 << 10), shapeBinary(64 << 10)},
	}
}

func shapeMiddleware(b *testing.B, c shapeCase) http.Handler {
	mw, err := idempotency.Middleware(idempotency.Config{
		Store:   newMemStore(),
		Subject: idempotency.ContextSubject(func(context.Context) string { return "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01" }),
		Settings: idempotency.Settings{
			Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard,
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	return mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", c.contentType)
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(c.resp)
	}))
}

func shapeRequest(c shapeCase, body *reusableBody) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/tasks", nil)
	r.Header.Set("Content-Type", c.contentType)
	r.Header.Set("Idempotency-Key", uuid.NewString())
	body.Reset(c.req)
	r.Body = body
	r.ContentLength = int64(len(c.req)) // as a client sends it
	return r
}

func BenchmarkShapeMiddlewareFirst(b *testing.B) {
	for _, c := range shapeCases() {
		b.Run(c.name, func(b *testing.B) {
			h := shapeMiddleware(b, c)
			body := &reusableBody{}
			r := shapeRequest(c, body)
			keys := make([]string, b.N)
			for i := range keys {
				keys[i] = uuid.NewString()
			}
			w := &discardWriter{h: http.Header{}}
			b.SetBytes(int64(len(c.req) + len(c.resp)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				r.Header["Idempotency-Key"][0] = keys[i]
				body.Reset(c.req)
				clear(w.h)
				w.n = 0
				h.ServeHTTP(w, r)
				if w.status != http.StatusCreated || w.n != len(c.resp) {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
		})
	}
}

func BenchmarkShapeMiddlewareReplay(b *testing.B) {
	for _, c := range shapeCases() {
		b.Run(c.name, func(b *testing.B) {
			h := shapeMiddleware(b, c)
			body := &reusableBody{}
			r := shapeRequest(c, body)
			w := &discardWriter{h: http.Header{}}
			h.ServeHTTP(w, r)
			b.SetBytes(int64(len(c.req) + len(c.resp)))
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				body.Reset(c.req)
				clear(w.h)
				w.n = 0
				h.ServeHTTP(w, r)
				if w.status != http.StatusCreated || w.n != len(c.resp) || w.h.Get(idempotency.ReplayedHeader) != "true" {
					b.Fatalf("status %d, %d bytes, replayed %q", w.status, w.n, w.h.Get(idempotency.ReplayedHeader))
				}
			}
		})
	}
}

type shapeResult struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Count  int    `json:"count"`
}

func shapeFunction(b *testing.B) func(context.Context, string) (shapeResult, error) {
	f, err := idempotency.Function(func(_ context.Context, id string) (shapeResult, error) {
		return shapeResult{ID: id, Status: "done", Count: 3}, nil
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
	return f
}

func BenchmarkShapeFunctionFirst(b *testing.B) {
	f := shapeFunction(b)
	ids := make([]string, b.N)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		if _, err := f(ctx, ids[i]); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkShapeFunctionReplay(b *testing.B) {
	f := shapeFunction(b)
	ctx := context.Background()
	if _, err := f(ctx, "task-1"); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		out, err := f(ctx, "task-1")
		if err != nil || out.Count != 3 {
			b.Fatal(out, err)
		}
	}
}
