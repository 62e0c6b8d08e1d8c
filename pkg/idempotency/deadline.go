package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// deadlineContext is a context with the values of its parent, none of its
// cancellation, and deadline as its Deadline.
type deadlineContext struct {
	context.Context
	deadline time.Time
}

func (c deadlineContext) Deadline() (time.Time, bool) { return c.deadline, true }

// deadlineRun returns the context of a run whose lease ends at its
// deadline plus LeaseMargin. At the deadline it is cancelled with a cause
// that wraps idemstore.ErrLeaseLost and context.DeadlineExceeded, whoever
// cancels first: the parent's timer, or a caller that gave up at its own
// deadline (a gRPC client resets the stream then, and the server sees a
// plain cancellation). A cancellation that comes more than LeaseMargin
// before the deadline keeps its own cause. stop releases the timers.
func (e *engine) deadlineRun(parent context.Context, deadline time.Time) (ctx context.Context, stop func()) {
	runCtx, cancel := context.WithCancelCause(deadlineContext{context.WithoutCancel(parent), deadline})
	lost := func() {
		cancel(fmt.Errorf("the run's deadline passed; its lease ends %v later and may then be another invocation's: %w (%w)", e.leaseMargin, idemstore.ErrLeaseLost, context.DeadlineExceeded))
	}
	timer := time.AfterFunc(time.Until(deadline), lost)
	stopParent := context.AfterFunc(parent, func() {
		cause := context.Cause(parent)
		atDeadline := errors.Is(cause, context.DeadlineExceeded) ||
			(errors.Is(cause, context.Canceled) && time.Until(deadline) <= e.leaseMargin)
		if atDeadline {
			lost()
			return
		}
		cancel(cause)
	})
	return runCtx, func() {
		timer.Stop()
		stopParent()
		cancel(nil)
	}
}
