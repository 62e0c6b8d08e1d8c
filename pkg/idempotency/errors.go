package idempotency

import (
	"errors"
	"fmt"
)

// ErrLeaseLost is returned by Store.Complete and Store.Release when the caller
// no longer owns the record: its lease ran out and another invocation took it
// over, or it was deleted. Nothing was written.
var ErrLeaseLost = errors.New("idempotency: lease lost: the record is no longer owned by this invocation")

// StoreError wraps any failure of a Store other than ErrLeaseLost: the store
// could not be reached, timed out or failed. The decorator answers it with 503
// and never shows its text to a client.
type StoreError struct {
	// Op is the Store method that failed: "claim", "complete" or "release".
	Op string
	// Err is the underlying driver error.
	Err error
}

func (e *StoreError) Error() string { return fmt.Sprintf("idempotency store %s: %v", e.Op, e.Err) }

// Unwrap returns the underlying error.
func (e *StoreError) Unwrap() error { return e.Err }
