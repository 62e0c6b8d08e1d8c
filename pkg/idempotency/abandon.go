package idempotency

import (
	"context"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// AbandonCompletion gives the completion of the run that ctx belongs to
// back to the engine, after AtomicCompletion (or AtomicResult, TakeOver)
// handed it out but the Completion was not written: the caller's
// transaction rolled back before it committed. The engine then completes
// or releases the record itself when the handler returns, as if the
// completion had never been taken over, and the handler may answer with
// another response (or call DoNotStore).
//
// The case in point is a handler that sends its writes and the completion
// in one batch and finds, when the batch fails as a whole, that it must
// answer otherwise: the sample task API's create, whose insert conflicts
// with the row of a retry after the key store was lost. Calling it after
// the completion was written would let the engine write the record again,
// so a caller must know the write rolled back.
//
// It reports false, and changes nothing, outside a protected run or when
// the completion was not taken over.
func AbandonCompletion(ctx context.Context) bool {
	run, ok := currentRun(ctx)
	if !ok || !run.takenOver.Load() {
		return false
	}
	run.atomicStored = idemstore.Response{}
	run.takenOver.Store(false)
	return true
}
