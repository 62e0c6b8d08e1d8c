package reliability

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// completedCreate is a create that got its 201, kept to be replayed.
type completedCreate struct {
	c     call
	token string
	first answer
}

// loadState is what the load's requests share.
type loadState struct {
	mu         sync.Mutex
	done       []completedCreate
	counts     map[string]int // kind → answers as expected
	unexpected []string
	latencies  []time.Duration
}

func (s *loadState) ok(kind string, d time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts[kind]++
	s.latencies = append(s.latencies, d)
}

func (s *loadState) bad(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.unexpected) < 20 {
		s.unexpected = append(s.unexpected, fmt.Sprintf(format, args...))
	} else {
		s.unexpected[19] = "and more"
	}
	s.counts["unexpected"]++
}

func (s *loadState) pick(r *rand.Rand) (completedCreate, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.done) == 0 {
		return completedCreate{}, false
	}
	return s.done[r.IntN(len(s.done))], true
}

// TestSteadyLoad sends requests at a fixed rate for a minute to a worker
// process built as the Lambda functions are (taskfn.Build), mixing new
// keys, replays, reused keys and reads: every answer is the expected one,
// no task is duplicated, and the server's memory stays flat. Soak only.
func TestSteadyLoad(t *testing.T) {
	if !soak() {
		t.Skip("a soak case: run with -soak or ICHIDO_SOAK=1 (make soak)")
	}
	const (
		duration = 60 * time.Second
		rate     = 50 // requests per second
		users    = 20
		inFlight = 256
	)
	db := apptest.New(t)
	w := startWorker(t, modeTaskfn, workerEnv(db.URL, nil))
	tokens := make([]string, users)
	for i := range tokens {
		tokens[i] = token(t, newUser())
	}

	// Warm up, then take the baseline after a collection.
	for i := range 50 {
		a, err := send(context.Background(), w.URL, call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, body: taskBody(fmt.Sprintf("warm-up %d", i))}, tokens[i%users])
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, a.status)
	}
	start := w.stats(t, true)
	startRows := countRows(t, db.Pool)

	st := &loadState{counts: map[string]int{}}
	samples := []workerStats{start}
	var sampleMu sync.Mutex
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		tick := time.NewTicker(5 * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				s := w.stats(t, false)
				sampleMu.Lock()
				samples = append(samples, s)
				sampleMu.Unlock()
			}
		}
	}()

	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	var sent, late int
	ticker := time.NewTicker(time.Second / rate)
	deadline := time.Now().Add(duration)
	for i := 0; time.Now().Before(deadline); i++ {
		<-ticker.C
		select {
		case sem <- struct{}{}:
		default:
			late++ // the server fell behind: counted, not sent
			continue
		}
		sent++
		wg.Go(func() {
			defer func() { <-sem }()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			loadRequest(context.Background(), w.URL, st, r, tokens[r.IntN(users)], i)
		})
	}
	ticker.Stop()
	wg.Wait()
	close(stopSampling)
	<-sampled
	end := w.stats(t, true)

	rows := countRows(t, db.Pool)
	dups := duplicateTasks(t, db.Pool)
	created := st.counts["new"]
	require.Empty(t, st.unexpected, "unexpected answers")
	require.Zero(t, dups)
	require.Equal(t, created, rows.Tasks-startRows.Tasks, "one task per new key, none per replay or reused key")
	require.Equal(t, created, rows.Keys-startRows.Keys, "one key record per new key")

	var maxRSS, maxHeap uint64
	for _, s := range append(samples, end) {
		maxRSS, maxHeap = max(maxRSS, s.RSS), max(maxHeap, s.HeapInuse)
	}
	// Flat: after a collection the heap is back near where it started;
	// a leak of even a few hundred bytes per request would show here.
	require.Less(t, end.HeapInuse, start.HeapInuse+16<<20, "heap in use grew from %d to %d bytes", start.HeapInuse, end.HeapInuse)
	require.Less(t, end.Goroutines, start.Goroutines+20, "goroutines grew from %d to %d", start.Goroutines, end.Goroutines)

	slices.Sort(st.latencies)
	pct := func(p float64) time.Duration {
		return st.latencies[int(p*float64(len(st.latencies)-1))].Round(100 * time.Microsecond)
	}
	mib := func(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
	record(t, Result{
		Case:  "steady load",
		Tried: fmt.Sprintf("%v at %d requests/s to one worker process built by taskfn.Build (pool of 2): 50%% new keys, 30%% replays, 10%% the same key with another body, 10%% reads, over %d users", duration, rate, users),
		Times: sent,
		Seen: fmt.Sprintf("%d × 201 new, %d × 201 byte-exact replays, %d × 422 idempotency_key_reused, %d × 200 reads, 0 other; %d ticks skipped (server behind); latency p50 %v, p99 %v; server RSS start %s, end %s, max %s; heap in use after GC start %s, end %s (max %s); goroutines %d → %d",
			st.counts["new"], st.counts["replay"], st.counts["mismatch"], st.counts["read"], late, pct(0.5), pct(0.99),
			mib(start.RSS), mib(end.RSS), mib(maxRSS), mib(start.HeapInuse), mib(end.HeapInuse), mib(maxHeap), start.Goroutines, end.Goroutines),
		Lost: lostSummary(map[string]int{"duplicate tasks": dups, "unexpected answers": st.counts["unexpected"], "missing tasks": created - (rows.Tasks - startRows.Tasks)}),
	})
}

// loadRequest sends one request of the mix and checks its answer.
func loadRequest(ctx context.Context, base string, st *loadState, r *rand.Rand, tok string, i int) {
	kind := "new"
	prev, ok := st.pick(r)
	switch n := r.IntN(10); {
	case !ok || n < 5:
	case n < 8:
		kind = "replay"
	case n < 9:
		kind = "mismatch"
	default:
		kind = "read"
	}
	began := time.Now()
	switch kind {
	case "new":
		c := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, body: taskBody(fmt.Sprintf("load %d", i))}
		a, err := send(ctx, base, c, tok)
		switch {
		case err != nil:
			st.bad("new: %v", err)
		case a.status != http.StatusCreated || a.replayed():
			st.bad("new: %d replayed=%t %s", a.status, a.replayed(), a.body)
		default:
			st.ok(kind, time.Since(began))
			st.mu.Lock()
			st.done = append(st.done, completedCreate{c: c, token: tok, first: a})
			st.mu.Unlock()
		}
	case "replay":
		a, err := send(ctx, base, prev.c, prev.token)
		switch {
		case err != nil:
			st.bad("replay: %v", err)
		case a.status != http.StatusCreated || !a.replayed() || !bytes.Equal(a.body, prev.first.body) ||
			a.header.Get("Location") != prev.first.header.Get("Location"):
			st.bad("replay: %d replayed=%t %s", a.status, a.replayed(), a.body)
		default:
			st.ok(kind, time.Since(began))
		}
	case "mismatch":
		c := prev.c
		c.body = taskBody(fmt.Sprintf("another body %d", i))
		a, err := send(ctx, base, c, prev.token)
		switch {
		case err != nil:
			st.bad("mismatch: %v", err)
		case a.status != http.StatusUnprocessableEntity || !bytes.Contains(a.body, []byte(`"code":"`+idempotency.CodeKeyReused+`"`)):
			st.bad("mismatch: %d %s", a.status, a.body)
		default:
			st.ok(kind, time.Since(began))
		}
	case "read":
		a, err := send(ctx, base, call{method: http.MethodGet, path: prev.first.header.Get("Location")}, prev.token)
		switch {
		case err != nil:
			st.bad("read: %v", err)
		case a.status != http.StatusOK:
			st.bad("read: %d %s", a.status, a.body)
		default:
			st.ok(kind, time.Since(began))
		}
	}
}
