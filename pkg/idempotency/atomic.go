package idempotency

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
)

// TakeCompletion hands the run's completion to its caller, for store to write
// in the caller's own transaction (pgstore's CompleteRunInTx and
// CompleteRunInBatch). The engine then does not complete the record. result is
// what the run answers with. A handler run by Wrap or Middleware passes its
// response (an AnyResponse type). A function run by Function or SQSHandler
// passes its result, kept as JSON. It reports false, and changes nothing, after
// DoNotStore, for a response that is not stored (Storable), or when the
// completion was already taken. It fails, changing nothing, when store is not
// the run's store or result is not of the run's kind.
func (r *runState) TakeCompletion(store any, result any) (idemstore.Completion, bool, error) {
	if any(r.e.store) != store {
		return idemstore.Completion{}, false, errors.New("idempotency: the store is not the one this run was claimed with; complete with the engine's own Store")
	}
	if r.stored == nil {
		resp, err := resultResponse(result)
		if err != nil {
			return idemstore.Completion{}, false, fmt.Errorf("idempotency: the result does not encode as JSON: %w", err)
		}
		c, ok := r.takeCompletion(resp)
		return c, ok, nil
	}
	view, ok := responseView(result)
	if !ok {
		return idemstore.Completion{}, false, fmt.Errorf("idempotency: a protected request's result must be its response, one of the AnyResponse types, not %T", result)
	}
	if !Storable(view.StatusCode) {
		return idemstore.Completion{}, false, nil
	}
	c, ok := r.takeCompletion(r.stored(view))
	return c, ok, nil
}

// ReturnCompletion gives back a completion that TakeCompletion handed out but that
// was not written. That happens when the caller's transaction rolled back before it
// committed. The engine then completes or releases the record itself when the
// handler returns, as if the completion had never been taken. The handler may answer
// with another response, or call DoNotStore. It reports false, and changes nothing,
// when the completion was not taken over.
func (r *runState) ReturnCompletion() bool {
	if !r.completionTaken.Load() {
		return false
	}
	r.takenResponse = idemstore.Response{}
	r.completionTaken.Store(false)
	return true
}

var _ runctx.Run = (*runState)(nil)

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

// DoNotStore tells the engine not to store the answer of ctx's run. The record
// is then released, and the next request with the key runs again. A handler
// calls it when its own data shows that the key belongs to another request. An
// example is a retry after the key store was lost: it is refused with 422, an
// answer that must not become the key's. It reports false, and changes nothing,
// outside a protected run or after the completion was written in the handler's
// own transaction.
func DoNotStore(ctx context.Context) bool {
	run, ok := currentRun(ctx)
	if !ok || run.completionTaken.Load() {
		return false
	}
	run.doNotStore.Store(true)
	return true
}
