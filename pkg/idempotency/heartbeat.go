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

// heartbeatBeats is how many renewals a lease gets before it would run out. A
// run renews every Heartbeat/heartbeatBeats. So a renewal or two may fail (a
// dropped connection, a slow store) without losing the lease.
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

// renewMargin is how long before its lease could run out, on the local
// clock, a run whose renewals have all failed is told it may have lost its
// lease: LeaseMargin (the same margin that covers two clocks' disagreement
// for a run with a deadline), but at most one beat, so that a short
// heartbeat still leaves the renewals time.
func (e *engine) renewMargin() time.Duration {
	return min(e.leaseMargin, e.heartbeat/heartbeatBeats)
}

// heartbeat renews one run's lease until stopped. Its counters belong to
// its goroutine until stop returns.
type heartbeat struct {
	e      *engine
	run    *runState
	cancel context.CancelCauseFunc
	quit   chan struct{}
	done   chan struct{}

	calls   int
	renewed bool // a renewal succeeded
	ms      float64
	err     error // the last failure, if any
}

// startHeartbeat renews the run's lease every Heartbeat/heartbeatBeats,
// each time to one heartbeat from then, until the returned heartbeat is
// stopped. granted is when, on the local monotonic clock, the claim's lease
// was measured from (just before the claim was sent). The renewals run
// detached from ctx's cancellation (a client that went away does not stop
// the work).
//
// The run is told, by cancelling the returned context (the run's) with a
// cause that wraps ErrLeaseLost, as soon as its lease may be another
// invocation's:
//
//   - when no renewal has succeeded by the last lease's start plus
//     Heartbeat less renewMargin, on the local monotonic clock (fail
//     closed: a store that cannot be reached for a whole lease is what lets
//     another invocation take the key over, and it is exactly then that no
//     renewal can say so); a renewal that gets through later may still
//     keep the record, but the run has been told, and the renewals stop;
//   - when a renewal finds the lease lost (another invocation took the key
//     over), unless the run's handler completed the record in its own
//     transaction: a record completed under this run's owner token is this
//     run's own finish, and the renewals just stop;
//   - when a renewal fails permanently (idemstore.Error.Permanent), with a
//     cause that wraps that idemstore.Error, since no later renewal could
//     succeed.
//
// While the handler holds the completion (it wrote it in its own open
// transaction), nothing is renewed and nothing is told: that transaction
// holds the record's row, and its commit or rollback settles the record.
// A completion given back resumes the renewals.
//
// A renewal that fails otherwise is tried again at the next beat. Each is
// bounded by the renewal period and by the time left before the run is
// told.
func (e *engine) startHeartbeat(ctx context.Context, run *runState, granted time.Time) (context.Context, *heartbeat) {
	runCtx, cancel := context.WithCancelCause(ctx)
	hb := &heartbeat{e: e, run: run, cancel: cancel, quit: make(chan struct{}), done: make(chan struct{})}
	hold := e.heartbeat - e.renewMargin() // how long a lease is held for, locally
	if time.Since(granted) >= hold {
		// The claim's answer came back after its lease could have run out
		// (a slow store): the handler starts already told.
		close(hb.done)
		hb.tell(hold, nil)
		return runCtx, hb
	}
	go hb.beat(context.WithoutCancel(ctx), granted, hold)
	return runCtx, hb
}

func (hb *heartbeat) beat(ctx context.Context, granted time.Time, hold time.Duration) {
	defer close(hb.done)
	e := hb.e
	period := e.heartbeat / heartbeatBeats
	ticker := time.NewTicker(period)
	defer ticker.Stop()
	told := time.NewTimer(time.Until(granted.Add(hold)))
	defer told.Stop()
	var last error // the failure of the renewals since the last success
	for {
		select {
		case <-hb.quit:
			return
		case <-told.C:
			if hb.run.completionTaken.Load() {
				// The run's own transaction holds the record: nothing to
				// tell while it is open. Look again a period later.
				told.Reset(period)
				continue
			}
			hb.tell(hold, last)
			return
		case <-ticker.C:
		}
		if hb.run.completionTaken.Load() {
			// The handler completed the record in its own open
			// transaction, which holds the record's row: a renewal would
			// wait on that lock. Its commit settles the record.
			continue
		}
		sent, now := time.Now(), e.clock()
		until := sent.Add(period)
		if t := granted.Add(hold); t.Before(until) {
			until = t
		}
		rctx, cancel := context.WithDeadline(ctx, until)
		err := e.store.Renew(rctx, idemstore.Renewal{Ref: hb.run.ref, Now: now, LeaseUntil: now.Add(e.heartbeat)})
		cancel()
		hb.calls++
		hb.ms += msSince(sent)
		if hb.run.span != nil {
			hb.run.span.StoreCall("renew", sent, time.Since(sent), errorClass(err))
		}
		switch {
		case err == nil:
			hb.renewed = true
			granted, last = sent, nil
			told.Reset(time.Until(granted.Add(hold)))
		case errors.Is(err, idemstore.ErrLeaseLost):
			if hb.run.completionTaken.Load() && e.completedBy(ctx, hb.run.ref) {
				return // the handler's own transaction completed the record
			}
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
			last = err
			hb.err = fmt.Errorf("renewing the lease (tried again at the next beat): %w", err)
			if !time.Now().Before(granted.Add(hold)) && !hb.run.completionTaken.Load() {
				hb.tell(hold, last)
				return
			}
		}
	}
}

// tell cancels the run: no renewal has succeeded for hold, so its lease may
// run out before it could hear so.
func (hb *heartbeat) tell(hold time.Duration, last error) {
	err := fmt.Errorf("no renewal of the lease succeeded for %v, so the lease may be another invocation's; the run is cancelled: %w", hold, idemstore.ErrLeaseLost)
	if last != nil {
		err = fmt.Errorf("%w (last renewal: %w)", err, last)
	}
	hb.err = err
	hb.cancel(err)
}

// stop ends the renewals, waits for the last one, and adds them to obs.
func (hb *heartbeat) stop(obs *observation) {
	close(hb.quit)
	<-hb.done
	hb.cancel(nil)
	obs.renewed = hb.renewed
	if hb.calls > 0 {
		obs.storeMS = append(obs.storeMS, storeCall{op: "renew", ms: hb.ms, calls: hb.calls})
	}
	if hb.err != nil {
		obs.err = errors.Join(obs.err, hb.err)
		obs.permanent = obs.permanent || idemstore.IsPermanent(hb.err)
	}
}
