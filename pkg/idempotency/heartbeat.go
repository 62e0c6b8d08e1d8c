package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// DefaultHeartbeat is the lease of a run that renews it (Config.Heartbeat).
const DefaultHeartbeat = 30 * time.Second

// HeartbeatOff, as Config.Heartbeat, turns lease renewal off: a run with no
// deadline then holds its key for MaxLease, as a crashed one does.
const HeartbeatOff time.Duration = -1

// heartbeatBeats is how many renewals a lease gets before it would run out:
// a run renews every Heartbeat/heartbeatBeats, so that a renewal or two may
// fail (a dropped connection, a slow store) without losing the lease.
const heartbeatBeats = 3

// beats reports whether a run whose claim is made at now (Config.Clock)
// with ctx renews its lease: always when ctx has no deadline (a net/http
// request, a Function called outside Lambda), and, with
// Config.HeartbeatLongRuns, when the deadline's lease would be longer than
// one heartbeat.
func (e *engine) beats(ctx context.Context, now time.Time) bool {
	if e.heartbeat <= 0 {
		return false
	}
	if _, ok := ctx.Deadline(); !ok {
		return true
	}
	return e.heartbeatLongRuns && leaseUntil(ctx, now, time.Now(), e.leaseMargin, e.maxLease).Sub(now) > e.heartbeat
}

// lease returns the lease of a claim made at now: one heartbeat for a run
// that renews it, else the deadline's lease (leaseUntil).
func (e *engine) lease(ctx context.Context, now time.Time, beat bool) time.Time {
	if beat {
		return now.Add(e.heartbeat)
	}
	return leaseUntil(ctx, now, time.Now(), e.leaseMargin, e.maxLease)
}

// heartbeat renews one run's lease until stopped. Its counters belong to
// its goroutine until stop returns.
type heartbeat struct {
	e      *engine
	ref    idemstore.Ref
	cancel context.CancelCauseFunc
	quit   chan struct{}
	done   chan struct{}

	calls int
	ms    float64
	err   error // the last failure, if any
}

// startHeartbeat renews ref's lease every Heartbeat/heartbeatBeats, each
// time to one heartbeat from then, until the returned heartbeat is stopped.
// The renewals run detached from ctx's cancellation (a client that went
// away does not stop the work), each bounded by the renewal period. A
// renewal that fails is tried again at the next beat; one that finds the
// lease lost (another invocation took the key over after the renewals
// failed for a whole lease) stops the beat and cancels the returned
// context, the run's, with a cause that wraps ErrLeaseLost; so does a
// renewal that fails permanently (idemstore.Error.Permanent), with a cause that
// wraps that idemstore.Error, since no later renewal could succeed.
func (e *engine) startHeartbeat(ctx context.Context, ref idemstore.Ref) (context.Context, *heartbeat) {
	runCtx, cancel := context.WithCancelCause(ctx)
	hb := &heartbeat{e: e, ref: ref, cancel: cancel, quit: make(chan struct{}), done: make(chan struct{})}
	go hb.run(context.WithoutCancel(ctx))
	return runCtx, hb
}

func (hb *heartbeat) run(ctx context.Context) {
	defer close(hb.done)
	period := hb.e.heartbeat / heartbeatBeats
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	for {
		select {
		case <-hb.quit:
			return
		case <-ticker.C:
		}
		now := hb.e.clock()
		rctx, cancel := context.WithTimeout(ctx, period)
		start := time.Now()
		err := hb.e.store.Renew(rctx, idemstore.Renewal{Ref: hb.ref, Now: now, LeaseUntil: now.Add(hb.e.heartbeat)})
		cancel()
		hb.calls++
		hb.ms += msSince(start)
		switch {
		case err == nil:
		case errors.Is(err, idemstore.ErrLeaseLost):
			hb.err = fmt.Errorf("renewing the lease: %w", err)
			hb.cancel(hb.err)
			return
		case idemstore.IsPermanent(err):
			// No renewal will succeed (a missing grant, the renewal function
			// not migrated): the lease runs out within a heartbeat and the
			// key is then another invocation's, so the run is stopped now,
			// failing closed, rather than left to race a second run.
			hb.err = fmt.Errorf("renewing the lease failed for good, the run is cancelled: %w", err)
			hb.cancel(hb.err)
			return
		default:
			hb.err = fmt.Errorf("renewing the lease (tried again at the next beat): %w", err)
		}
	}
}

// stop ends the renewals, waits for the last one, and adds them to obs.
func (hb *heartbeat) stop(obs *observation) {
	close(hb.quit)
	<-hb.done
	hb.cancel(nil)
	if hb.calls > 0 {
		obs.storeMS = append(obs.storeMS, storeCall{op: "renew", ms: hb.ms, calls: hb.calls})
	}
	if hb.err != nil {
		obs.err = errors.Join(obs.err, hb.err)
		obs.permanent = obs.permanent || idemstore.IsPermanent(hb.err)
	}
}
