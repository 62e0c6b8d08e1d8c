// Package runctx carries the run that a handler's context belongs to from
// the engine to a store of this library, so that a store can write the
// run's completion inside its caller's own transaction while the engine
// keeps the rest of the flow.
package runctx

import (
	"context"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Run is a claimed run, as a store sees it.
type Run interface {
	// TakeCompletion hands the run's completion to the caller, for a write by
	// store inside the caller's transaction: the engine then does not
	// complete the record itself. result is what the run answers with (an
	// HTTP handler's response, a function's result). It reports false when
	// there is nothing to complete, and fails when store is not the run's
	// store or result is not of the run's kind.
	TakeCompletion(store any, result any) (idemstore.Completion, bool, error)
	// ReturnCompletion returns a completion that TakeCompletion handed out but that was
	// not written (the caller's transaction rolled back): the engine then
	// completes or releases the record itself. It reports false when
	// nothing was handed out.
	ReturnCompletion() bool
}

type key struct{}

// With returns ctx carrying r.
func With(ctx context.Context, r Run) context.Context {
	return context.WithValue(ctx, key{}, r)
}

// From returns the run ctx carries.
func From(ctx context.Context) (Run, bool) {
	r, ok := ctx.Value(key{}).(Run)
	return r, ok
}
