package storetest

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// The cases past the round-trip floor: the local cache (Config.LocalCache),
// the wait for an in-flight duplicate's answer (Config.WaitForResult) and
// the heartbeat lease of a run without a deadline (Config.Heartbeat), for
// every HTTP shape and for Function and SQSHandler, on the Store under test.

// blocking is a handler that counts its runs, signals started when a run
// begins, and answers only once release is closed. If its context is done
// first, it answers 500 and keeps the context's cause in cause.
type blocking struct {
	e       *env
	status  func(run int32) int
	started chan int32
	release chan struct{}
	// releaseAll lets every run go on; it may be called more than once.
	releaseAll func()

	mu    sync.Mutex
	cause error
}

func (e *env) blocking(status func(run int32) int) *blocking {
	b := &blocking{e: e, status: status, started: make(chan int32, 8), release: make(chan struct{})}
	b.releaseAll = sync.OnceFunc(func() { close(b.release) })
	e.t.Cleanup(b.releaseAll) // a case that failed early leaves no handler blocked
	return b
}

func (b *blocking) handler(ctx context.Context, _ idempotency.Request) (apigw.Response, error) {
	n := b.e.runs.Add(1)
	b.started <- n
	select {
	case <-b.release:
	case <-ctx.Done():
		b.mu.Lock()
		b.cause = context.Cause(ctx)
		b.mu.Unlock()
		return apigw.Response{StatusCode: http.StatusInternalServerError}, nil
	}
	return apigw.Response{
		StatusCode: b.status(n),
		Headers:    http.Header{"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/tasks/%d", n)}},
		Body:       fmt.Sprintf(`{"run":%d}`, n),
	}, nil
}

// async runs r through inv on a goroutine and returns its answer's channel.
func (e *env) async(inv invoker, r request) <-chan apigw.Response {
	out := make(chan apigw.Response, 1)
	go func() {
		resp, err := inv(context.Background(), r)
		if err != nil {
			resp = apigw.Response{StatusCode: -1, Body: err.Error()}
		}
		out <- resp
	}()
	return out
}

// eventually waits (on the real clock, up to 10s) until cond holds.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, 5*time.Millisecond, what)
}

// logLine returns the decorator's log line whose outcome is outcome.
func (e *env) logLine(outcome string) map[string]any {
	e.t.Helper()
	for _, line := range jsonLines(e.t, e.logs) {
		if line["msg"] == "idempotency" && line["outcome"] == outcome {
			return line
		}
	}
	require.Failf(e.t, "no log line", "outcome %q in %s", outcome, e.logs.String())
	return nil
}

// claimReportsExpiry reports whether the store's claim of the case's key,
// completed already, gives the record's expiry, which the local cache needs
// to keep a record it did not complete itself. It claims once, without
// counting.
func (e *env) claimReportsExpiry() bool {
	e.t.Helper()
	now := e.clock.Now()
	res, err := e.store.inner.Claim(context.Background(), idemstore.Claim{
		Ref:         idemstore.Ref{UserID: idempotency.SubjectUUID(e.user), Key: idempotency.RecordKey("", idempotency.KeyUUIDv4, e.key), Owner: uuid.NewString()},
		Fingerprint: "another request",
		Now:         now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour),
	})
	require.NoError(e.t, err)
	require.False(e.t, res.Claimed, "the case's key is completed")
	return !res.Record.ExpiresAt.IsZero()
}

// requireInProgressWithin sends a duplicate of the case's request whose
// deadline is timeout away, and checks that it is refused as in progress
// before that deadline.
func (e *env) requireInProgressWithin(inv invoker, timeout time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	start := time.Now()
	dup, err := inv(ctx, e.post(`{}`))
	require.NoError(e.t, err)
	requireProblem(e.t, dup, http.StatusConflict, idempotency.CodeKeyInUse)
	deadline, _ := ctx.Deadline()
	require.True(e.t, time.Now().Before(deadline), "answered before the deadline, after %v", time.Since(start))
}

// claimRoundTrip is the slowest of three claims (each of a fresh record,
// released at once) made on the store under test directly, uncounted.
func (e *env) claimRoundTrip() time.Duration {
	e.t.Helper()
	var slowest time.Duration
	for range 3 {
		now := time.Now()
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "round-trip"}
		start := time.Now()
		_, err := e.store.inner.Claim(context.Background(), idemstore.Claim{Ref: ref, Fingerprint: "round-trip", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Minute)})
		slowest = max(slowest, time.Since(start))
		require.NoError(e.t, err)
		require.NoError(e.t, e.store.inner.Release(context.Background(), ref))
	}
	return slowest
}

func withCache(c *idempotency.Config) { c.LocalCache = &idempotency.LocalCache{} }

func withWait(d time.Duration) func(*idempotency.Config) {
	return func(c *idempotency.Config) { c.WaitForResult = d }
}

func withHeartbeat(d time.Duration) func(*idempotency.Config) {
	return func(c *idempotency.Config) { c.Heartbeat = d }
}

var cacheWaitHeartbeatCases = []behaviourCase{
	{"the local cache answers a repeat with no store call, until the record expires", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), withCache, func(c *idempotency.Config) {
			c.TTL, c.MaxLease = time.Hour, time.Minute
		})
		first := e.do(inv, e.post(`{"title": "cache"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		calls := e.store.calls()

		e.clock.Advance(time.Minute)
		replay := e.do(inv, e.post(`{"title": "cache"}`))
		requireReplay(t, first, replay)
		reused := e.do(inv, e.post(`{"title": "another request"}`))
		requireProblem(t, reused, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.Equal(t, calls, e.store.calls(), "answered from the cache: no store call")
		require.EqualValues(t, 1, e.runs.Load())
		line := e.logLine("replayed")
		require.Equal(t, true, line["cached"])
		require.NotContains(t, line, "store", "no store latency for a cached answer")
		e.requireMetric("cache_hit")

		// An hour after the completion the record has expired, in the cache
		// and in the store: the request runs again.
		e.clock.Advance(time.Hour)
		again := e.do(inv, e.post(`{"title": "cache"}`))
		require.Equal(t, http.StatusCreated, again.StatusCode)
		require.Empty(t, again.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"the local cache lends a record's fingerprint only to the request it answered", func(t *testing.T, e *env) {
		// The record is made by another process (no cache) with one body;
		// this process, with a cache, sees another body first.
		other := e.wrap(e.respond(http.StatusCreated))
		inv := e.wrap(e.respond(http.StatusCreated), withCache)
		first := e.do(other, e.post(`{"title": "a", "due": "2026-12-31"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		reused := e.do(inv, e.post(`{"title": "b"}`))
		requireProblem(t, reused, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		// A store may leave the response out of the record it shows another
		// request; the replay brings it into the cache either way.
		replay := e.do(inv, e.post(`{"title": "a", "due": "2026-12-31"}`))
		requireReplay(t, first, replay)
		calls := e.store.calls()

		// The cached record now answers without the store: still 422 for
		// the other bytes, and a replay for the request that made it, sent
		// as it was or with its members reordered and spaced.
		reused = e.do(inv, e.post(`{"title": "b"}`))
		requireProblem(t, reused, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		replay = e.do(inv, e.post(`{ "due":"2026-12-31",  "title":"a" }`))
		requireReplay(t, first, replay)
		replay = e.do(inv, e.post(`{"title": "a", "due": "2026-12-31"}`))
		requireReplay(t, first, replay)
		reused = e.do(inv, e.post(`{"title": "b"}`))
		requireProblem(t, reused, http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.EqualValues(t, 1, e.runs.Load())
		// Only a record whose expiry the store's claim reports is cached
		// (LocalCache); pgstore's claim leaves it out, so there every one of
		// these requests was answered by the store.
		if e.claimReportsExpiry() {
			require.Equal(t, calls, e.store.calls(), "answered from the cache: no store call")
		} else {
			require.Equal(t, calls+4, e.store.calls(), "no cache: one claim each")
		}
	}},
	{"the local cache keeps neither refusals nor records in progress", func(t *testing.T, e *env) {
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withCache)
		first := e.async(inv, e.post(`{}`))
		<-b.started
		dup := e.do(inv, e.post(`{}`))
		requireProblem(t, dup, http.StatusConflict, idempotency.CodeKeyInUse)
		claims := e.store.claims.Load()
		dup = e.do(inv, e.post(`{}`))
		requireProblem(t, dup, http.StatusConflict, idempotency.CodeKeyInUse)
		require.Equal(t, claims+1, e.store.claims.Load(), "an in-progress record is asked of the store each time")
		b.releaseAll()
		require.Equal(t, http.StatusCreated, (<-first).StatusCode)
	}},
	{"a waiting duplicate replays the first request's answer", func(t *testing.T, e *env) {
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withWait(10*time.Second))
		first := e.async(inv, e.post(`{"title": "wait"}`))
		<-b.started
		dup := e.async(inv, e.post(`{"title": "wait"}`))
		// The duplicate's claim found the record in progress, and it polls.
		eventually(t, func() bool { return e.store.claims.Load() >= 3 }, "the duplicate polls")
		const held = 300 * time.Millisecond
		time.Sleep(held) // the first run goes on; the duplicate waits at least this long
		b.releaseAll()
		firstResp, dupResp := <-first, <-dup
		require.Equal(t, http.StatusCreated, firstResp.StatusCode)
		requireReplay(t, firstResp, dupResp)
		require.EqualValues(t, 1, e.runs.Load())
		line := e.logLine("replayed")
		store := line["store"].(map[string]any)
		require.GreaterOrEqual(t, store["wait_calls"], float64(1))
		require.GreaterOrEqual(t, line["waited_ms"], float64(held.Milliseconds()), "the log says how long the duplicate waited, not only its polls' store time")
		e.requireMetric("waited")
	}},
	{"a waiting duplicate gives up at its bound with 409", func(t *testing.T, e *env) {
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withWait(150*time.Millisecond))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		dup := e.do(inv, e.post(`{}`))
		requireProblem(t, dup, http.StatusConflict, idempotency.CodeKeyInUse)
		require.Equal(t, "1", dup.Headers.Get("Retry-After"))
		require.Greater(t, e.store.claims.Load(), int32(2), "it polled before giving up")
		b.releaseAll()
		require.Equal(t, http.StatusCreated, (<-first).StatusCode)
	}},
	{"a waiting duplicate never waits past its own deadline", func(t *testing.T, e *env) {
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withWait(time.Minute))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		e.requireInProgressWithin(inv, 400*time.Millisecond)
		b.releaseAll()
		require.Equal(t, http.StatusCreated, (<-first).StatusCode)
	}},
	{"a waiting duplicate on a slow store still answers before its deadline", func(t *testing.T, e *env) {
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withWait(time.Minute))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		release := b.releaseAll
		defer release() // a failed check must not leave the first run blocked
		// Each claim now takes 150ms more than the store's own round trip,
		// more than the 100ms kept free before the deadline: the last poll
		// must not start when it cannot answer. The deadline leaves room
		// for the store's own round trips (a store on a loaded machine, an
		// emulator, takes tens of milliseconds), so that the duplicate can
		// poll at all.
		rtt := e.claimRoundTrip()
		e.store.claimDelay.Store(int64(150 * time.Millisecond))
		e.requireInProgressWithin(inv, 700*time.Millisecond+4*rtt)
		require.Greater(t, e.store.claims.Load(), int32(2), "it polled")
		e.store.claimDelay.Store(0)
		release()
		require.Equal(t, http.StatusCreated, (<-first).StatusCode)
	}},
	{"a waiting duplicate runs itself when the first request fails", func(t *testing.T, e *env) {
		b := e.blocking(func(run int32) int {
			if run == 1 {
				return http.StatusInternalServerError
			}
			return http.StatusCreated
		})
		inv := e.wrap(b.handler, withWait(10*time.Second))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		dup := e.async(inv, e.post(`{}`))
		eventually(t, func() bool { return e.store.claims.Load() >= 3 }, "the duplicate polls")
		b.releaseAll()
		require.Equal(t, http.StatusInternalServerError, (<-first).StatusCode)
		dupResp := <-dup
		require.Equal(t, http.StatusCreated, dupResp.StatusCode, "the key was released: the duplicate claimed it and ran")
		require.Empty(t, dupResp.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a run without a deadline renews its lease while it lasts", func(t *testing.T, e *env) {
		// A run is told it lost its lease when no renewal has come back
		// within a third of a beat less than the beat: the beat leaves a
		// slow store (an emulator on a loaded machine) room to answer, so
		// that the renewals go on for the whole test.
		beat := max(time.Second, 20*e.claimRoundTrip())
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withHeartbeat(beat))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		// Well past the first lease by the caller's clock: only the renewals
		// that follow keep the record.
		e.clock.Advance(time.Hour)
		renews := e.store.renews.Load()
		eventually(t, func() bool { return e.store.renews.Load() > renews+2 }, "the lease is renewed")
		dup := e.do(inv, e.post(`{}`))
		requireProblem(t, dup, http.StatusConflict, idempotency.CodeKeyInUse)
		b.releaseAll()
		firstResp := <-first
		require.Equal(t, http.StatusCreated, firstResp.StatusCode)
		requireReplay(t, firstResp, e.do(inv, e.post(`{}`)))
		line := e.logLine("completed")
		require.Equal(t, true, line["heartbeat"])
		store := line["store"].(map[string]any)
		require.GreaterOrEqual(t, store["renew_calls"], float64(2))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a run whose renewals fail is told it lost its lease before the lease can run out, and a retry runs only after", func(t *testing.T, e *env) {
		const beat = 600 * time.Millisecond
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withHeartbeat(beat))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		// The first server is cut off from the store: its renewals fail, and
		// no renewal can reach the store to hear that the lease ran out.
		e.store.failRenew.Store(true)
		cutOff := time.Now()
		var firstResp apigw.Response
		select {
		case firstResp = <-first:
		case <-time.After(10 * beat):
			t.Fatal("the run was never told: its renewals failed for a whole lease and its context is still live")
		}
		told := time.Since(cutOff)
		require.Equal(t, http.StatusInternalServerError, firstResp.StatusCode)
		b.mu.Lock()
		cause := b.cause
		b.mu.Unlock()
		require.ErrorIs(t, cause, idemstore.ErrLeaseLost)
		// The last renewal that succeeded was sent before the cut; the lease
		// it granted runs out one heartbeat after it.
		require.Less(t, told, beat, "the run is told before its lease can run out")
		require.Contains(t, e.logLine("released")["error"], "no renewal of the lease succeeded")

		// Only now, its lease run out by the caller's clock, the retry runs.
		e.clock.Advance(beat)
		second := e.async(inv, e.post(`{}`))
		require.EqualValues(t, 2, <-b.started, "one heartbeat later the retry runs")
		e.store.failRenew.Store(false)
		b.releaseAll()
		require.Equal(t, http.StatusCreated, (<-second).StatusCode)
		requireReplay(t, apigw.Response{StatusCode: http.StatusCreated, Body: `{"run":2}`,
			Headers: http.Header{"Content-Type": {"application/json"}, "Location": {"/tasks/2"}}}, e.do(inv, e.post(`{}`)))
	}},
	{"a run whose renewal hears its key was taken over learns it lost the lease", func(t *testing.T, e *env) {
		const beat = 300 * time.Millisecond
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withHeartbeat(beat))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		e.store.lostRenew.Store(true)
		require.Equal(t, http.StatusInternalServerError, (<-first).StatusCode)
		b.mu.Lock()
		cause := b.cause
		b.mu.Unlock()
		require.ErrorIs(t, cause, idemstore.ErrLeaseLost)
		require.Contains(t, cause.Error(), "renewing the lease")
	}},
	{"a run with a deadline keeps the deadline's lease and makes no renewals", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), withHeartbeat(30*time.Millisecond))
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		resp, err := inv(ctx, e.post(`{}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Zero(t, e.store.renews.Load())
		require.NotContains(t, e.logLine("completed"), "heartbeat")
	}},
}

func withFunctionCache[In any](c *idempotency.FunctionConfig[In]) {
	c.LocalCache = &idempotency.LocalCache{}
}

func withFunctionWait[In any](d time.Duration) func(*idempotency.FunctionConfig[In]) {
	return func(c *idempotency.FunctionConfig[In]) { c.WaitForResult = d }
}

var cacheWaitHeartbeatFunctionCases = []functionCase{
	{"the local cache returns a repeat's result with no store call", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, withFunctionCache[order])
		o := order{ID: uuid.NewString(), Items: 1}
		first, err := f(context.Background(), o)
		require.NoError(t, err)
		calls := e.store.calls()
		again, err := f(context.Background(), o)
		require.NoError(t, err)
		require.Equal(t, first.Run, again.Run)
		require.True(t, first.At.Equal(again.At))
		require.Equal(t, calls, e.store.calls())
		require.EqualValues(t, 1, e.runsOf(o.ID))
		require.Contains(t, e.logs.String(), `"cached":true`)
	}},
	{"a waiting repeat returns the first call's result instead of ErrInProgress", func(t *testing.T, e *funcEnv) {
		started, release := make(chan struct{}), make(chan struct{})
		f := e.newOrder(func(ctx context.Context, o order) error {
			close(started)
			<-release
			return nil
		}, withFunctionWait[order](10*time.Second))
		o := order{ID: uuid.NewString()}
		type result struct {
			r   receipt
			err error
		}
		firstC, dupC := make(chan result, 1), make(chan result, 1)
		go func() { r, err := f(context.Background(), o); firstC <- result{r, err} }()
		<-started
		go func() { r, err := f(context.Background(), o); dupC <- result{r, err} }()
		eventually(t, func() bool { return e.store.claims.Load() >= 3 }, "the repeat polls")
		close(release)
		first, dup := <-firstC, <-dupC
		require.NoError(t, first.err)
		require.NoError(t, dup.err)
		require.Equal(t, first.r.Run, dup.r.Run)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"sqs: a waiting redelivery succeeds instead of failing the record", func(t *testing.T, e *funcEnv) {
		m := sqsMessage(`{}`)
		started, release := make(chan struct{}), make(chan struct{})
		h := e.batchHandler(func(events.SQSMessage) error {
			close(started)
			<-release
			return nil
		}, withFunctionWait[events.SQSMessage](10*time.Second))
		batch := events.SQSEvent{Records: []events.SQSMessage{m}}
		firstC := make(chan events.SQSEventResponse, 1)
		go func() { r, _ := h(context.Background(), batch); firstC <- r }()
		<-started
		dupC := make(chan events.SQSEventResponse, 1)
		go func() { r, _ := h(context.Background(), batch); dupC <- r }()
		eventually(t, func() bool { return e.store.claims.Load() >= 3 }, "the redelivery polls")
		close(release)
		require.Empty(t, (<-firstC).BatchItemFailures)
		require.Empty(t, (<-dupC).BatchItemFailures, "the redelivered record waited and counts as done")
		require.EqualValues(t, 1, e.runsOf(m.MessageId))
	}},
	{"a call without a deadline renews its lease, and is told before the lease can run out when its renewals fail", func(t *testing.T, e *funcEnv) {
		const beat = 600 * time.Millisecond
		started, release := make(chan struct{}, 2), make(chan struct{})
		var causes []error
		var mu sync.Mutex
		f := e.newOrder(func(ctx context.Context, o order) error {
			started <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				mu.Lock()
				causes = append(causes, context.Cause(ctx))
				mu.Unlock()
				return ctx.Err()
			}
		}, func(c *idempotency.FunctionConfig[order]) { c.Heartbeat = beat })
		o := order{ID: uuid.NewString()}
		firstC := make(chan error, 1)
		go func() { _, err := f(context.Background(), o); firstC <- err }()
		<-started
		e.clock.Advance(time.Hour)
		renews := e.store.renews.Load()
		eventually(t, func() bool { return e.store.renews.Load() > renews+2 }, "the lease is renewed")
		_, err := f(context.Background(), o)
		require.ErrorIs(t, err, idempotency.ErrInProgress, "the renewed lease holds past the first one")

		// Cut off from the store, the call is told before its lease can run
		// out; only then can a retry run.
		e.store.failRenew.Store(true)
		cutOff := time.Now()
		select {
		case err := <-firstC:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(10 * beat):
			t.Fatal("the call was never told: its renewals failed for a whole lease and its context is still live")
		}
		require.Less(t, time.Since(cutOff), beat, "the call is told before its lease can run out")
		mu.Lock()
		require.Len(t, causes, 1)
		require.ErrorIs(t, causes[0], idemstore.ErrLeaseLost)
		mu.Unlock()
		e.clock.Advance(beat)
		secondC := make(chan error, 1)
		go func() { _, err := f(context.Background(), o); secondC <- err }()
		<-started
		e.store.failRenew.Store(false)
		close(release)
		require.NoError(t, <-secondC)
		require.EqualValues(t, 2, e.runsOf(o.ID))
	}},
}
