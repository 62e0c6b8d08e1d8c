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
// could not be reached, timed out, refused the call or failed. The HTTP
// shapes answer it with 503 idempotency_store_unavailable (Retry-After: 1)
// when it is transient and with 500 idempotency_store_misconfigured (no
// Retry-After) when it is Permanent, and never show its text to a client.
type StoreError struct {
	// Op is the Store method that failed: "claim", "complete", "release"
	// or "renew" ("check" for CheckStore).
	Op string
	// Err is the underlying driver error.
	Err error
	// Permanent is set by the Store when repeating the call cannot succeed
	// until someone changes the deployment: missing privileges, missing
	// objects (table, functions, schema, database), failed authentication,
	// a value under the store's keys that is not a record, a response too
	// large to keep (ErrTooLarge). The engine does not retry such a failure
	// and still fails closed. False means transient: the network, a
	// timeout, a failover, throttling.
	Permanent bool
}

func (e *StoreError) Error() string {
	if e.Permanent {
		return fmt.Sprintf("idempotency store %s (permanent): %v", e.Op, e.Err)
	}
	return fmt.Sprintf("idempotency store %s: %v", e.Op, e.Err)
}

// Unwrap returns the underlying error.
func (e *StoreError) Unwrap() error { return e.Err }

// IsPermanent reports whether err holds a *StoreError whose Permanent flag
// is set: a failure of the store's configuration that no retry cures.
func IsPermanent(err error) bool {
	var se *StoreError
	return errors.As(err, &se) && se.Permanent
}

// ErrTooLarge is wrapped by the permanent *StoreError that Store.Complete
// returns when the response's record would exceed the largest record the
// store can keep. Nothing was written; the engine then completes the record
// with the not-kept marker (StoredResponse.NotKept).
var ErrTooLarge = errors.New("idempotency: the response is larger than the largest record the store can keep")

// ErrResultNotKept is returned by a function made idempotent by Function
// when its key completed before but the result could not be kept (it did
// not encode as JSON, or was too large for the store): the function ran
// once and does not run again. SQSHandler skips such a record as done.
var ErrResultNotKept = errors.New("idempotency: the call with this key completed, but its result could not be kept")

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
