package idempotency

import (
	"errors"
	"fmt"
)

// ErrLeaseLost is returned by Store.Complete, Store.Release and Store.Renew
// when the caller no longer owns the record: its lease ran out and another
// invocation took it over, or it was deleted. Nothing was written.
var ErrLeaseLost = errors.New("idempotency: lease lost: the record is no longer owned by this invocation")

// StoreError wraps any failure of a Store other than ErrLeaseLost: the store
// could not be reached, timed out or failed. The decorator answers it with 503
// and never shows its text to a client.
type StoreError struct {
	// Op is the Store method that failed: "claim", "complete", "release" or
	// "renew".
	Op string
	// Err is the underlying driver error.
	Err error
}

func (e *StoreError) Error() string { return fmt.Sprintf("idempotency store %s: %v", e.Op, e.Err) }

// Unwrap returns the underlying error.
func (e *StoreError) Unwrap() error { return e.Err }

// ErrInProgress is returned by a function made idempotent by Function (and
// counted as a failed record by SQSHandler) when another call with the same
// key still runs: the function did not run, and the trigger should retry
// later.
var ErrInProgress = errors.New("idempotency: a call with this key is still in progress")

// ErrKeyReused is returned by a function made idempotent by Function when
// its key is known but was used with another payload
// (FunctionConfig.Payload): the function did not run.
var ErrKeyReused = errors.New("idempotency: the key was already used with another payload")

// ErrNoKey is returned by a function made idempotent by Function when
// FunctionConfig.Key gave an empty key: the function did not run.
var ErrNoKey = errors.New("idempotency: the input has no idempotency key")

// ErrBatchFailed is returned, with the response naming every record, by a
// handler of SQSHandler when no record of the batch succeeded, so that the
// whole batch is retried even where ReportBatchItemFailures was left off.
var ErrBatchFailed = errors.New("idempotency: every record of the batch failed")
