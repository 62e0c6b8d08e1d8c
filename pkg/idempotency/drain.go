package idempotency

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// ErrShuttingDown is returned by a Function call made after its Drain's
// Shutdown began: the function did not run.
var ErrShuttingDown = errors.New("idempotency: the service is shutting down")

// drainCutoff is how long Shutdown waits, after its grace period, for the
// runs it cancelled to return and release their records themselves.
const drainCutoff = 2 * time.Second

// Drain stops a server's protected calls cleanly (Settings.Drain). The zero
// value is ready to use.
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

// Shutdown refuses new calls (503, ErrShuttingDown) and lets those in
// flight run until ctx is done. Then it cancels them, with the cause
// ErrShuttingDown, and releases their records, so that a retry elsewhere
// runs at once. It returns an error when it cut a run off.
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
	cutoff, stop := context.WithTimeout(context.WithoutCancel(ctx), drainCutoff)
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
