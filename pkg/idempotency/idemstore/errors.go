package idemstore

import (
	"errors"
	"fmt"
)

// ErrLeaseLost is returned by Store.Complete, Store.Release and Store.Renew
// when the caller no longer owns the record. Its lease ran out and another
// invocation took it over, or it was deleted. Nothing was written.
var ErrLeaseLost = errors.New("idempotency: lease lost: the record is no longer owned by this invocation")

// Error wraps any failure of a Store other than ErrLeaseLost: the store could
// not be reached, timed out, refused the call or failed. The HTTP shapes answer
// a transient one with 503 idempotency_store_unavailable (Retry-After: 1). They
// answer a Permanent one with 500 idempotency_store_misconfigured (no
// Retry-After). They never show its text to a client.
type Error struct {
	// Op is the Store method that failed: "claim", "complete", "release"
	// or "renew" ("check" for CheckStore).
	Op string
	// Err is the underlying driver error.
	Err error
	// Permanent is set by the Store when repeating the call cannot succeed
	// until someone changes the deployment. Examples are missing privileges and
	// missing objects (table, functions, schema, database). Others are failed
	// authentication, a value under the store's keys that is not a record, and
	// a response too large to keep (ErrTooLarge). The engine does not retry
	// such a failure and still fails closed. False means transient: the
	// network, a timeout, a failover, throttling.
	Permanent bool
}

func (e *Error) Error() string {
	if e.Permanent {
		return fmt.Sprintf("idempotency store %s (permanent): %v", e.Op, e.Err)
	}
	return fmt.Sprintf("idempotency store %s: %v", e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// IsPermanent reports whether err holds a *Error whose Permanent flag
// is set: a failure of the store's configuration that no retry cures.
func IsPermanent(err error) bool {
	if err == nil {
		return false // before se, which escapes: no allocation for nil
	}
	var se *Error
	return errors.As(err, &se) && se.Permanent
}

// ErrTooLarge is wrapped by the permanent *Error that Store.Complete
// returns when the response's record would exceed the largest record the
// store can keep. Nothing was written; the engine then completes the record
// with the not-kept marker (Response.NotKept).
var ErrTooLarge = errors.New("idempotency: the response is larger than the largest record the store can keep")
