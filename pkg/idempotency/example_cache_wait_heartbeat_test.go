package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// countingStore counts the calls that reach a Store and remembers the
// leases its claims and renewals asked for.
type countingStore struct {
	idemstore.Store
	calls, renewals atomic.Int32
	lease           atomic.Int64 // the last claim's lease, from its Now
}

func (s *countingStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	s.calls.Add(1)
	s.lease.Store(int64(c.LeaseUntil.Sub(c.Now)))
	return s.Store.Claim(ctx, c)
}

func (s *countingStore) Complete(ctx context.Context, c idemstore.Completion) error {
	s.calls.Add(1)
	return s.Store.Complete(ctx, c)
}

func (s *countingStore) Renew(ctx context.Context, r idemstore.Renewal) error {
	s.calls.Add(1)
	s.renewals.Add(1)
	return s.Store.Renew(ctx, r)
}

// A local cache of completed records: the repeats of a call this execution
// environment completed are answered from memory, with no store round trip.
// The same field exists on Config for the HTTP shapes.
func ExampleLocalCache() {
	store := &countingStore{Store: exampleStore()}
	charge, err := idempotency.Function(func(ctx context.Context, orderID string) (string, error) {
		return "charged " + orderID, nil
	}, idempotency.FunctionConfig[string]{
		Store: store,
		Name:  "charge",
		Key:   func(_ context.Context, orderID string) (string, error) { return orderID, nil },
		Settings: idempotency.Settings{
			LocalCache: &idempotency.LocalCache{MaxEntries: 10_000, MaxBytes: 16 << 20},
			Logger:     slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics:    io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	for range 3 {
		out, _ := charge(context.Background(), "order-7")
		fmt.Printf("%s (store calls so far: %d)\n", out, store.calls.Load())
	}
	// Output:
	// charged order-7 (store calls so far: 2)
	// charged order-7 (store calls so far: 2)
	// charged order-7 (store calls so far: 2)
}

// A duplicate that arrives while the first request still runs waits for
// its answer (here up to 5 seconds) and replays it, instead of a 409.
func ExampleConfig_waitForResult() {
	started, finish := make(chan struct{}), make(chan struct{})
	var runs atomic.Int32
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			close(started)
			<-finish
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprint(w, `{"id":1}`)
	})
	mw, err := idempotency.Middleware(idempotency.Config{
		Store:   exampleStore(),
		Subject: idempotency.StaticSubject("5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"),
		Settings: idempotency.Settings{
			WaitForResult: 5 * time.Second,
			Logger:        slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics:       io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	h := mw(create)
	post := func() *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, "/tasks", strings.NewReader(`{"title":"t"}`))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}

	first := make(chan *httptest.ResponseRecorder)
	go func() { first <- post() }()
	<-started
	duplicate := make(chan *httptest.ResponseRecorder)
	go func() { duplicate <- post() }()
	time.Sleep(50 * time.Millisecond) // the duplicate finds the key in progress and waits
	close(finish)

	for _, rec := range []*httptest.ResponseRecorder{<-first, <-duplicate} {
		fmt.Println(rec.Code, rec.Header().Get("Idempotent-Replayed"), rec.Body.String())
	}
	fmt.Println("runs:", runs.Load())
	// Output:
	// 201  {"id":1}
	// 201 true {"id":1}
	// runs: 1
}

// A net/http request has no deadline, so its lease is one Heartbeat (30
// seconds by default; 300 milliseconds here), renewed every third of it while
// the handler runs: a crashed server frees its keys within one Heartbeat.
func ExampleConfig_heartbeat() {
	store := &countingStore{Store: exampleStore()}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(700 * time.Millisecond) // longer than the lease
		w.WriteHeader(http.StatusNoContent)
	})
	mw, err := idempotency.Middleware(idempotency.Config{
		Store:   store,
		Subject: idempotency.StaticSubject("5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"),
		Settings: idempotency.Settings{
			Heartbeat: 300 * time.Millisecond,
			Logger:    slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics:   io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	req := httptest.NewRequest(http.MethodDelete, "/tasks/1", nil)
	req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	rec := httptest.NewRecorder()
	mw(slow).ServeHTTP(rec, req)

	fmt.Println(rec.Code)
	fmt.Println("lease:", time.Duration(store.lease.Load()))
	fmt.Println("renewed while it ran:", store.renewals.Load() >= 2)
	// Output:
	// 204
	// lease: 300ms
	// renewed while it ran: true
}
