package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/emf"
	"github.com/ichido/ichido/pkg/idempotency/internal/reccache"
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// engine is the one claim–run–finish flow behind every shape this package
// offers: Wrap (API Gateway, Function URLs, ALB), Middleware (net/http),
// Function (any typed function) and SQSHandler. Each shape turns its input
// into a Ref and a fingerprint and lets the engine claim. It decides what a
// record that is not its own means for its caller. Then it hands the work to
// execute, which runs it and completes or releases the record.
type engine struct {
	store         idemstore.Store
	ttl           time.Duration
	maxLease      time.Duration
	leaseMargin   time.Duration
	finishTimeout time.Duration
	owner         func(ctx context.Context) string
	clock         func() time.Time
	logger        *slog.Logger
	metrics       *emf.Writer

	// heartbeat is the lease of a run that renews it (0: renewal off);
	// heartbeatLongRuns renews runs with a deadline too (Config).
	heartbeat         time.Duration
	heartbeatLongRuns bool
	// wait bounds how long a duplicate waits for the first run's answer
	// (0: it does not wait).
	wait time.Duration
	// cache keeps completed records in this process (nil: no cache).
	cache *reccache.Cache
	// observer starts each call's span (nil: none); storeName names the
	// store's type for it.
	observer  observe.Observer
	storeName string
	// logDigest keys the digests a log line shows for keys and users (nil:
	// their values).
	logDigest []byte
	// drain tracks the runs for a clean shutdown (nil: none).
	drain *Drain
}

// newEngine returns the engine of a defaulted Config.
func newEngine(cfg Config) *engine {
	return &engine{
		store:         cfg.Store,
		ttl:           cfg.TTL,
		maxLease:      cfg.MaxLease,
		leaseMargin:   cfg.LeaseMargin,
		finishTimeout: cfg.FinishTimeout,
		owner:         cfg.Owner,
		clock:         cfg.Clock,
		logger:        cfg.Logger,
		metrics:       emf.New(cfg.Metrics, cfg.Namespace),

		heartbeat:         max(cfg.Heartbeat, 0),
		heartbeatLongRuns: cfg.HeartbeatLongRuns,
		wait:              cfg.WaitForResult,
		cache:             newCache(cfg.LocalCache),
		observer:          cfg.Observer,
		storeName:         storeName(cfg.Store),
		logDigest:         cfg.LogDigestSecret,
		drain:             cfg.Drain,
	}
}

// storeName is the name of a store's type for a span: its package's name
// ("pgstore"), or its type's.
func storeName(s idemstore.Store) string {
	name := strings.TrimPrefix(fmt.Sprintf("%T", s), "*")
	if pkg, typ, ok := strings.Cut(name, "."); ok && typ == "Store" {
		return pkg
	}
	return name
}

// startSpan starts the span of a call when an Observer is set, and returns
// the context the call goes on in.
func (e *engine) startSpan(ctx context.Context, obs *observation, c observe.Call) context.Context {
	obs.digest = e.logDigest
	if e.observer == nil {
		return ctx
	}
	c.Store = e.storeName
	ctx, obs.span = e.observer.Start(ctx, c)
	return ctx
}

// origin is what a record completed at now keeps of its run's span.
func origin(span observe.Span, now time.Time) *idemstore.Origin {
	if span == nil {
		return nil
	}
	o := span.Origin()
	if o == nil {
		return nil
	}
	o.At = now.Truncate(time.Microsecond).UTC()
	return o
}

// claimRecoveryTimeout bounds the release that follows a failed claim
// (recoverClaim). It runs detached from the invocation's cancellation, since
// a claim that timed out may well have committed; the caller is waiting for
// its refusal meanwhile, so the bound is short.
const claimRecoveryTimeout = 2 * time.Second

// Pauses between the attempts of a Complete or Release that failed
// (finish): from the first pause, doubling up to the longest.
const (
	firstRetryPause   = 50 * time.Millisecond
	longestRetryPause = time.Second
)

// claim makes the one claim round trip for (userID, key) with the request
// fingerprint hash, on behalf of a new owner token: the lease runs to the
// invocation's deadline plus the margin, never past MaxLease from now, or
// is one heartbeat for a run that renews it (heartbeat.go). A claim that
// fails is recovered from (recoverClaim).
//
// Before the store, the local cache (Config.LocalCache) is asked: a
// completed record found there is the answer, with no round trip. After it,
// a duplicate that finds the record in progress for the same request waits
// for the first run's answer when Config.WaitForResult is set (wait.go).
func (e *engine) claim(ctx context.Context, obs *observation, userID, key, hash string) (idemstore.Ref, idemstore.ClaimResult, error) {
	if e.drain != nil && obs.drain == nil {
		run, ok := e.drain.enter()
		if !ok {
			obs.err = ErrShuttingDown
			return idemstore.Ref{UserID: userID, Key: key}, idemstore.ClaimResult{}, ErrShuttingDown
		}
		obs.drain, obs.drained = run, e.drain
	}
	obs.hash = hash
	obs.recordUser, obs.recordKey = userID, key
	obs.leaseFrom = time.Now() // read before the clock: never later than the lease's start
	now := e.clock()
	if res, ok := e.cached(userID, key, now); ok {
		// A completed record: nothing is claimed, so no owner token is made.
		obs.cached = true
		obs.origin = res.Record.Response.Origin
		return idemstore.Ref{UserID: userID, Key: key}, res, nil
	}
	ref := idemstore.Ref{UserID: userID, Key: key, Owner: e.owner(ctx)}
	obs.owner = ref.Owner
	obs.heartbeat = e.beats(ctx, now)
	c := idemstore.Claim{
		Ref:         ref,
		Fingerprint: hash,
		Now:         now,
		LeaseUntil:  e.lease(ctx, now, obs.heartbeat),
		ExpiresAt:   now.Add(e.ttl),
	}
	start := time.Now()
	res, err := e.store.Claim(ctx, c)
	obs.record("claim", start, err)
	if err != nil {
		res, err = e.recoverClaim(ctx, c, err, obs)
	}
	if err == nil && e.wait > 0 && waiting(res, hash) {
		res, err = e.waitForResult(ctx, obs, c, res)
	}
	if err != nil {
		obs.err, obs.permanent = err, idemstore.IsPermanent(err)
		return ref, idemstore.ClaimResult{}, storeFailure("claim", err)
	}
	if res.Claimed {
		obs.claimed = true
		if obs.drain != nil {
			e.drain.claimed(obs.drain, func(ctx context.Context) error { return e.store.Release(ctx, ref) })
		}
	} else {
		if res.Record.Response != nil {
			obs.origin = res.Record.Response.Origin
		}
		e.keep(userID, key, res.Record, obs)
	}
	return ref, res, nil
}

// cached returns the completed record of (userID, key) from the local
// cache as a claim's answer.
func (e *engine) cached(userID, key string, now time.Time) (idemstore.ClaimResult, bool) {
	if e.cache == nil {
		return idemstore.ClaimResult{}, false
	}
	entry, ok := e.cache.Get(userID, key, now)
	if !ok {
		return idemstore.ClaimResult{}, false
	}
	resp := entry.Response
	return idemstore.ClaimResult{Record: idemstore.Record{
		UserID: userID, Key: key, Fingerprint: entry.Fingerprint, Status: idemstore.StatusCompleted,
		Response: &resp, ExpiresAt: entry.ExpiresAt,
	}}, true
}

// keep puts a completed record that a claim found into the local cache,
// when the store reported its expiry (a store may leave it zero).
//
// The raw digest of this request is kept with it only when the record is
// this request's (the same fingerprint): a record another request made must
// never lend its fingerprint to this one's bytes.
func (e *engine) keep(userID, key string, rec idemstore.Record, obs *observation) {
	if e.cache == nil || rec.Status != idemstore.StatusCompleted || rec.Response == nil || rec.ExpiresAt.IsZero() {
		return
	}
	var raw rawDigest
	if rec.Fingerprint == obs.hash {
		raw = obs.raw
	}
	e.cache.Put(userID, key, rec.Fingerprint, raw, *rec.Response, e.clock(), rec.ExpiresAt)
}

// recoverClaim handles a failed claim. A claim can commit and still fail on
// its way back (a timeout, a reset connection); left alone, that record
// would lock the key for the whole lease although no work ever ran, and
// every retry would be refused as in progress. So the claim is tried once
// more with the same owner token, which the Store counts as claimed when
// the first attempt had committed; if that fails too, the record is
// released with the same token. Both are safe: the work has not run, and
// the owner token fences off any record another invocation holds. The
// release runs even after the invocation's context is done, bounded by
// claimRecoveryTimeout. A permanent failure (idemstore.Error.Permanent) is not
// recovered from: the store refused the claim, so nothing was written.
func (e *engine) recoverClaim(ctx context.Context, c idemstore.Claim, first error, obs *observation) (idemstore.ClaimResult, error) {
	if idemstore.IsPermanent(first) {
		// The store refused the claim for good (a missing grant, a
		// missing table): nothing was written, and neither a second
		// claim nor a release could succeed.
		return idemstore.ClaimResult{}, first
	}
	if ctx.Err() == nil {
		var res idemstore.ClaimResult
		err := obs.timed("claim", func() (err error) {
			res, err = e.store.Claim(ctx, c)
			return err
		})
		if err == nil {
			obs.err = fmt.Errorf("claim recovered after a failed attempt: %w", first)
			return res, nil
		}
		first = errors.Join(first, err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimRecoveryTimeout)
	defer cancel()
	err := obs.timed("release", func() error { return e.store.Release(rctx, c.Ref) })
	switch {
	case err == nil:
		return idemstore.ClaimResult{}, fmt.Errorf("%w (the claim had committed and was released)", first)
	case errors.Is(err, idemstore.ErrLeaseLost):
		return idemstore.ClaimResult{}, first // nothing of ours was stored
	default:
		return idemstore.ClaimResult{}, errors.Join(first, fmt.Errorf("release after the failed claim: %w", err))
	}
}

// storeFailure makes sure a claim failure reaches the caller as a
// *idemstore.Error, whatever the Store returned, so that errors.As always finds
// one.
func storeFailure(op string, err error) error {
	var se *idemstore.Error
	if errors.As(err, &se) {
		return err
	}
	return &idemstore.Error{Op: op, Err: err}
}

// work is what a shape runs on a claimed record. It returns the response to
// store (keep true) or nothing to store (keep false: the record is
// released, as after a transient failure); an error releases the record too.
type work func(ctx context.Context) (resp idemstore.Response, keep bool, err error)

// execute runs w on the record that ref claimed and then completes it with
// w's response, or releases it when w fails, panics or keeps nothing. It
// returns w's error; a panic goes on after the release. The handler's
// context carries state, through which DoNotStore and a store's completion
// in the caller's transaction reach this run.
func (e *engine) execute(ctx context.Context, state *runState, obs *observation, w work) (err error) {
	state.span = obs.span
	ctx = runctx.With(ctx, state)
	runCtx := ctx
	var hb *heartbeat
	if obs.heartbeat {
		runCtx, hb = e.startHeartbeat(ctx, state, obs.leaseFrom)
	} else if deadline, ok := ctx.Deadline(); ok {
		var stop func()
		runCtx, stop = e.deadlineRun(ctx, deadline)
		defer stop()
	}
	if obs.drain != nil {
		var cancel context.CancelCauseFunc
		runCtx, cancel = context.WithCancelCause(runCtx)
		defer cancel(nil)
		e.drain.started(obs.drain, cancel)
	}
	start := time.Now()
	returned := false
	defer func() {
		if returned {
			return
		}
		// The work panicked (or called runtime.Goexit): free the key for the
		// retry, then let the panic go on.
		v := recover()
		obs.handler, obs.handlerMS = "panic", msSince(start)
		if hb != nil {
			hb.stop(obs)
		}
		e.release(ctx, state.ref, obs)
		if v != nil {
			panic(v)
		}
	}()
	resp, keep, err := w(runCtx)
	returned = true
	obs.handlerMS = msSince(start)
	if hb != nil {
		hb.stop(obs)
	}

	switch {
	case err != nil:
		obs.handler = "error"
		obs.err = err
		e.releaseRun(ctx, state, obs)
		return err
	case !keep || state.doNotStore.Load():
		obs.handler = "ok"
		e.releaseRun(ctx, state, obs)
		return nil
	case state.completionTaken.Load():
		// The work completed the record in its own transaction.
		obs.handler = "ok"
		obs.outcome = OutcomeCompleted
		return nil
	}
	obs.handler = "ok"
	e.complete(ctx, state.ref, resp, obs)
	return nil
}

// errResponseNotKept is logged when a run's response is replaced by the
// not-kept marker.
var errResponseNotKept = errors.New("the response could not be kept; the record is completed with the not-kept marker")

// complete stores the response. On ErrLeaseLost nothing is stored (another
// invocation owns the key now). A failing store is retried within the
// finish timeout (finish); when it keeps failing, the record is left in
// progress until its lease runs out rather than released, since the work
// is done and a release would invite an immediate second run.
//
// A response the store cannot keep (ErrTooLarge) is replaced by the
// not-kept marker (idemstore.Response.NotKept), so that the key stays completed
// and the work never runs again; the outcome is then OutcomeNotKept.
func (e *engine) complete(ctx context.Context, ref idemstore.Ref, resp idemstore.Response, obs *observation) {
	store := func(resp idemstore.Response) error {
		return e.finish(ctx, "complete", obs, func(ctx context.Context) error {
			now := e.clock()
			resp.Origin = origin(obs.span, now)
			return e.store.Complete(ctx, idemstore.Completion{Ref: ref, Response: resp, Now: now, ExpiresAt: now.Add(e.ttl)})
		})
	}
	err := store(resp)
	if errors.Is(err, idemstore.ErrTooLarge) && !resp.NotKept {
		obs.err = errors.Join(obs.err, fmt.Errorf("%w: %w", errResponseNotKept, err))
		resp = notKept(resp.StatusCode)
		err = store(resp)
	}
	ok := OutcomeCompleted
	if resp.NotKept {
		ok = OutcomeNotKept
	}
	obs.outcome = finishOutcome(err, ok)
	if err != nil {
		obs.err = errors.Join(obs.err, err)
		obs.permanent = obs.permanent || idemstore.IsPermanent(err)
		return
	}
	if e.cache != nil {
		now := e.clock()
		e.cache.Put(ref.UserID, ref.Key, obs.hash, obs.raw, resp, now, now.Add(e.ttl))
	}
}

// errCompletedInTx is logged when a handler took the completion into its own
// transaction, then failed or answered with a status that is not stored. The
// release found the record completed by this run. That is what the
// transaction leaves once it commits.
var errCompletedInTx = errors.New("the handler completed the record in its own transaction and then failed or answered with a status that is not stored; the record stays completed and its response replays")

// releaseRun releases the run's key after its work failed or answered with
// a response that is not stored. When the handler had taken the completion
// into its own transaction, a release that finds the key no longer in
// progress under this run most likely met that transaction's commit: when
// the store can show the record (Admin) and it is completed under this
// run's owner token, the outcome is completed, not a lost lease.
func (e *engine) releaseRun(ctx context.Context, state *runState, obs *observation) {
	err := e.releaseCall(ctx, state.ref, obs)
	if errors.Is(err, idemstore.ErrLeaseLost) && state.completionTaken.Load() && e.completedBy(ctx, state.ref) {
		obs.outcome = OutcomeCompleted
		obs.err = errors.Join(obs.err, errCompletedInTx)
		return
	}
	e.released(err, obs)
}

// completedBy reports whether the store shows the record of ref completed
// under ref's owner token; false when it cannot tell (no Admin, an error).
func (e *engine) completedBy(ctx context.Context, ref idemstore.Ref) bool {
	admin, ok := e.store.(idemstore.Admin)
	if !ok {
		return false
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishTimeout)
	defer cancel()
	rec, found, err := admin.Get(ctx, ref.UserID, ref.Key)
	return err == nil && found && rec.Status == idemstore.StatusCompleted && rec.Owner == ref.Owner
}

// release deletes the claimed record so that the next attempt runs again,
// retried like complete.
func (e *engine) release(ctx context.Context, ref idemstore.Ref, obs *observation) {
	e.released(e.releaseCall(ctx, ref, obs), obs)
}

// releaseCall makes the Release call, retried like a completion.
func (e *engine) releaseCall(ctx context.Context, ref idemstore.Ref, obs *observation) error {
	return e.finish(ctx, "release", obs, func(ctx context.Context) error { return e.store.Release(ctx, ref) })
}

// released records the outcome of a release that returned err.
func (e *engine) released(err error, obs *observation) {
	obs.outcome = finishOutcome(err, OutcomeReleased)
	if err != nil {
		obs.err = errors.Join(obs.err, err)
		obs.permanent = obs.permanent || idemstore.IsPermanent(err)
	}
}

// finish makes a Complete or Release call until it succeeds, returns
// ErrLeaseLost or a permanent idemstore.Error, or the finish timeout has passed, pausing longer after each
// failure. It runs detached from the invocation's cancellation: the work is
// done and must be recorded even if the caller went away. A call whose
// reply was lost after it committed is answered ErrLeaseLost when repeated
// (the record is no longer in progress), which is logged as such.
func (e *engine) finish(ctx context.Context, op string, obs *observation, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishTimeout)
	defer cancel()
	pause := firstRetryPause
	for attempt := 1; ; attempt++ {
		err := obs.timed(op, func() error { return call(ctx) })
		if errors.Is(err, idemstore.ErrLeaseLost) && attempt > 1 {
			return fmt.Errorf("%w (after a failed attempt, which may have committed)", err)
		}
		if err == nil || errors.Is(err, idemstore.ErrLeaseLost) || idemstore.IsPermanent(err) {
			return err
		}
		deadline, _ := ctx.Deadline()
		if time.Until(deadline) <= pause {
			return err
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		pause = min(2*pause, longestRetryPause)
	}
}

// completion returns the Completion that stores resp on the run's record,
// for a handler that writes it in its own transaction.
func (e *engine) completion(ref idemstore.Ref, resp idemstore.Response, span observe.Span) idemstore.Completion {
	now := e.clock()
	resp.Origin = origin(span, now)
	return idemstore.Completion{Ref: ref, Response: resp, Now: now, ExpiresAt: now.Add(e.ttl)}
}

// runState is one claimed run, shared with DoNotStore and with a store's
// completion in the caller's transaction (TakeCompletion) through the handler's
// context.
type runState struct {
	e   *engine
	ref idemstore.Ref
	// stored turns an HTTP response into what is kept; set by Wrap and
	// Middleware (nil for functions, whose results TakeCompletion encodes).
	stored func(apigw.Response) idemstore.Response
	// completionTaken is set when the handler took the completion into its own
	// transaction; the engine then does not complete the record again.
	completionTaken atomic.Bool
	// doNotStore is set by DoNotStore: the engine releases the record
	// instead of completing it.
	doNotStore atomic.Bool
	// takenResponse is the response the handler completed the record with
	// when it took the completion; set with completionTaken.
	takenResponse idemstore.Response
	// span is the call's span, whose origin the completion keeps (nil:
	// none).
	span observe.Span
}

// currentRun returns the run that ctx belongs to.
func currentRun(ctx context.Context) (*runState, bool) {
	r, _ := runctx.From(ctx)
	run, ok := r.(*runState)
	return run, ok
}

// takeCompletion hands the completion of the run to its handler, once, and
// returns the Completion to write.
func (r *runState) takeCompletion(resp idemstore.Response) (idemstore.Completion, bool) {
	if r.doNotStore.Load() || !r.completionTaken.CompareAndSwap(false, true) {
		return idemstore.Completion{}, false
	}
	r.takenResponse = resp
	return r.e.completion(r.ref, resp, r.span), true
}
