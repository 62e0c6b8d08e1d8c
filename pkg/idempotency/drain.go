package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// ErrShuttingDown is returned by a function made idempotent by Function
// once its Drain's Shutdown has begun: the call did not run, and a retry on
// another instance can run it. The HTTP shapes answer such a request 503
// idempotency_store_unavailable with Retry-After.
var ErrShuttingDown = errors.New("idempotency: the service is shutting down")

// DrainCutoff is how long Shutdown waits, after its grace period, for the
// runs it cancelled to return and release their records themselves.
const DrainCutoff = 2 * time.Second

// Drain lets a long-lived server stop cleanly. Set it as Settings.Drain on
// every shape the server protects, and call Shutdown when the server stops
// (on SIGTERM), beside http.Server.Shutdown or grpc.Server.GracefulStop.
// A record left in progress by a run cut off at exit would refuse every
// retry with 409 until its lease ran out; Shutdown releases it instead, so
// that a retry on another instance runs at once.
//
// The zero value is ready to use. A Drain is safe for concurrent use.
type Drain struct {
	mu      sync.Mutex
	closing bool
	runs    map[*drainRun]struct{}
	changed chan struct{} // closed and replaced whenever a run leaves
}

// drainRun is one protected call that a Drain tracks, from before its
// claim to its log line.
type drainRun struct {
	cut     bool                        // Shutdown cut it off
	cancel  context.CancelCauseFunc     // cancels its work; nil until the work starts
	release func(context.Context) error // releases its claim; nil unless claimed
}

// enter registers a call; false once Shutdown has begun.
func (d *Drain) enter() (*drainRun, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closing {
		return nil, false
	}
	if d.runs == nil {
		d.runs = map[*drainRun]struct{}{}
		d.changed = make(chan struct{})
	}
	r := &drainRun{}
	d.runs[r] = struct{}{}
	return r, true
}

// claimed records how to release the run's record.
func (d *Drain) claimed(r *drainRun, release func(context.Context) error) {
	d.mu.Lock()
	r.release = release
	d.mu.Unlock()
}

// started records how to cancel the run's work; a run cut off before its
// work started is cancelled at once.
func (d *Drain) started(r *drainRun, cancel context.CancelCauseFunc) {
	d.mu.Lock()
	r.cancel = cancel
	cut := r.cut
	d.mu.Unlock()
	if cut {
		cancel(ErrShuttingDown)
	}
}

// leave ends the tracking of a call.
func (d *Drain) leave(r *drainRun) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.runs, r)
	close(d.changed)
	d.changed = make(chan struct{})
}

// wait returns true once no call is in flight, false when stop fires first.
func (d *Drain) wait(stop <-chan struct{}) bool {
	for {
		d.mu.Lock()
		n, changed := len(d.runs), d.changed
		d.mu.Unlock()
		if n == 0 {
			return true
		}
		select {
		case <-changed:
		case <-stop:
			return false
		}
	}
}

// Shutdown stops the protected calls of the shapes that share d and
// returns once none is in flight.
//
// From its start, a new call is refused (503, or ErrShuttingDown) before
// anything is claimed. The calls in flight may finish until ctx is done:
// that is the grace period. Then each run still in flight has its context
// cancelled, with the cause ErrShuttingDown. A handler that stops when told
// returns, and its record is released as after any error. After
// DrainCutoff more, Shutdown releases the records of the runs that have not
// returned, fenced by their owner tokens, and returns.
//
// It returns nil when every call finished within the grace period, and
// otherwise an error that says how many runs were cut off and wraps
// ctx.Err() and any failed release.
func (d *Drain) Shutdown(ctx context.Context) error {
	d.mu.Lock()
	d.closing = true
	if d.changed == nil {
		d.changed = make(chan struct{})
	}
	d.mu.Unlock()
	if d.wait(ctx.Done()) {
		return nil
	}

	d.mu.Lock()
	cut := 0
	for r := range d.runs {
		r.cut = true
		cut++
		if r.cancel != nil {
			r.cancel(ErrShuttingDown)
		}
	}
	d.mu.Unlock()
	cutoff, stop := context.WithTimeout(context.WithoutCancel(ctx), DrainCutoff)
	defer stop()
	errs := []error{fmt.Errorf("idempotency: %d runs were cut off at shutdown: %w", cut, ctx.Err())}
	if d.wait(cutoff.Done()) {
		return errors.Join(errs...)
	}

	// The runs that ignored their cancellation: their records are released
	// here, since the process is about to exit.
	d.mu.Lock()
	var releases []func(context.Context) error
	for r := range d.runs {
		if r.release != nil {
			releases = append(releases, r.release)
		}
	}
	d.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), DefaultFinishTimeout)
	defer cancel()
	for _, release := range releases {
		if err := release(rctx); err != nil && !errors.Is(err, idemstore.ErrLeaseLost) {
			errs = append(errs, fmt.Errorf("releasing a record at shutdown: %w", err))
		}
	}
	return errors.Join(errs...)
}
