package idempotency

import (
	"context"

	"github.com/ichido/ichido/internal/apigw"
)

// AtomicCompletion lets a handler complete its idempotency record in the
// same database transaction as its own writes (spec: atomic completion), so
// that there is no moment at which the work is committed but the key is
// still in progress.
//
// Inside a handler run by Wrap, call it with the response the handler is
// about to return, write the returned Completion with the store's
// transactional method (for PostgreSQL, pgstore's CompleteInTx) in the
// handler's transaction, commit, and return resp unchanged:
//
//	c, ok := idempotency.AtomicCompletion(ctx, resp)
//	if ok {
//		if err := store.CompleteInTx(ctx, tx, c); err != nil {
//			return rollbackAndFail(err) // ErrLeaseLost: another invocation owns the key
//		}
//	}
//	if err := tx.Commit(ctx); err != nil { ... return the error }
//	return resp, nil
//
// Once it has returned ok, Wrap does not complete the record itself. If the
// handler then returns an error (its commit failed, say), Wrap releases the
// record as usual: the transaction rolled back, so the record is still in
// progress and owned by this invocation.
//
// It reports false, and changes nothing, outside a protected request, for a
// response that is not stored (Storable), or when called a second time.
func AtomicCompletion[Resp AnyResponse](ctx context.Context, resp Resp) (Completion, bool) {
	run, ok := currentRun(ctx)
	if !ok || run.stored == nil {
		return Completion{}, false
	}
	view := apigw.FromResponse(resp)
	if !Storable(view.StatusCode) {
		return Completion{}, false
	}
	return run.takeOver(run.stored(view))
}

// DoNotStore tells Wrap not to store the response of the protected request
// that ctx belongs to: when the handler returns, the record is released, as
// after a transient failure, and the client's next request with the key runs
// the handler again.
//
// A handler calls it when its own data shows that the key already belongs to
// another request. The case in point is a retry after the key store was lost
// (spec: no duplicate after losing keys): the task row records the key and
// the fingerprint of the request that created it, and a request reusing the
// key with another body is refused with 422. Stored, that 422 would become
// the key's answer, and the original request's own retry would then be
// refused too instead of getting its task back.
//
// It reports false, and changes nothing, outside a protected request or
// after the handler completed the record itself (AtomicCompletion).
func DoNotStore(ctx context.Context) bool {
	run, ok := currentRun(ctx)
	if !ok || run.takenOver.Load() {
		return false
	}
	run.doNotStore.Store(true)
	return true
}
