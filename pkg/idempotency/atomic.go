package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// TxCompleter is implemented by a Store that can complete a record inside
// a database transaction its caller holds, so that the caller's writes and
// the key's completion commit together: pgstore.Store, whose
// CompleteRunInTx is the one call a handler makes. AtomicCompletion,
// AtomicResult and TakeOver hand a completion out only when the engine's
// own Store implements it; on any other store (Redis) they report false,
// and the engine completes the record itself, as without them.
type TxCompleter interface {
	idemstore.Store
	// CompletesInTx marks the Store as one that can; it does nothing.
	CompletesInTx()
}

// TakeOver hands the completion of the run that ctx belongs to over to the
// caller, for a write inside the caller's own transaction by s, which must
// be the Store the run was claimed with: the engine then does not complete
// the record itself. result is what the run answers with: for a handler run
// by Wrap or Middleware the response it is about to return (one of the
// AnyResponse types), for a function run by Function or SQSHandler its
// result (kept as JSON).
//
// It is the primitive of a store's one-call atomic completion
// (pgstore.Store.CompleteRunInTx), which a handler calls instead; a Store
// author writes the returned Completion in the caller's transaction. It
// reports false, and changes nothing, outside a protected run, after
// DoNotStore, for a response that is not stored (Storable), or when the run
// was already taken over. It fails, changing nothing, when s is not the
// run's store or result is not of the run's kind.
func TakeOver(ctx context.Context, s TxCompleter, result any) (idemstore.Completion, bool, error) {
	run, ok := currentRun(ctx)
	if !ok {
		return idemstore.Completion{}, false, nil
	}
	if any(run.e.store) != any(s) {
		return idemstore.Completion{}, false, errors.New("idempotency: TakeOver: the store is not the one this run was claimed with; complete with the engine's own Store")
	}
	if run.stored == nil {
		resp, err := resultResponse(result)
		if err != nil {
			return idemstore.Completion{}, false, fmt.Errorf("idempotency: TakeOver: the result does not encode as JSON: %w", err)
		}
		c, ok := run.takeOver(resp)
		return c, ok, nil
	}
	view, ok := responseView(result)
	if !ok {
		return idemstore.Completion{}, false, fmt.Errorf("idempotency: TakeOver: a protected request's result must be its response, one of the AnyResponse types, not %T", result)
	}
	if !Storable(view.StatusCode) {
		return idemstore.Completion{}, false, nil
	}
	c, ok := run.takeOver(run.stored(view))
	return c, ok, nil
}

// responseView reads a response of one of the AnyResponse types.
func responseView(v any) (apigw.Response, bool) {
	switch r := v.(type) {
	case events.APIGatewayProxyResponse:
		return apigw.FromResponse(r), true
	case events.APIGatewayV2HTTPResponse:
		return apigw.FromResponse(r), true
	case events.LambdaFunctionURLResponse:
		return apigw.FromResponse(r), true
	case events.ALBTargetGroupResponse:
		return apigw.FromResponse(r), true
	}
	return apigw.Response{}, false
}

// AtomicCompletion lets a handler complete its idempotency record in the
// same database transaction as its own writes (spec: atomic completion), so
// that there is no moment at which the work is committed but the key is
// still in progress. With pgstore, prefer its CompleteRunInTx, which takes
// the run over and writes the completion in one call.
//
// Inside a handler run by Wrap or Middleware, call it with the response the
// handler is about to return, write the returned Completion with the
// store's transactional method (pgstore's CompleteInTx) in the handler's
// transaction, commit, and return (for Middleware: write) resp unchanged:
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
// progress and owned by this invocation. A handler that then answers with
// another response than the one it completed (another status, body or
// kept header; for Middleware, other bytes written than passed) gets its
// answer refused with 500 idempotency_response_mismatch: a replay is the
// response the client got, so the client is never given one that its
// retry would not get again.
//
// It reports false, and changes nothing, outside a protected request, when
// the engine's Store cannot complete inside the caller's transaction (it is
// no TxCompleter: Redis), for a response that is not stored (Storable), or
// when called a second time.
func AtomicCompletion[Resp AnyResponse](ctx context.Context, resp Resp) (idemstore.Completion, bool) {
	run, ok := currentRun(ctx)
	if !ok || run.stored == nil || !run.completesInTx() {
		return idemstore.Completion{}, false
	}
	view := apigw.FromResponse(resp)
	if !Storable(view.StatusCode) {
		return idemstore.Completion{}, false
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
