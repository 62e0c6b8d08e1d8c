package idempotency

import "errors"

// ErrResultNotKept is returned by a function made idempotent by Function when
// its key completed before but the result could not be kept. The result did not
// encode as JSON, or was too large for the store. The function ran once and
// does not run again. SQSHandler skips such a record as done.
var ErrResultNotKept = errors.New("idempotency: the call with this key completed, but its result could not be kept")

// ErrInProgress is returned by a function made idempotent by Function when
// another call with the same key still runs. SQSHandler counts it as a failed
// record. The function did not run, and the trigger should retry later.
var ErrInProgress = errors.New("idempotency: a call with this key is still in progress")

// ErrKeyReused is returned by a function made idempotent by Function when
// its key is known but was used with another payload
// (FunctionConfig.Payload): the function did not run.
var ErrKeyReused = errors.New("idempotency: the key was already used with another payload")

// ErrNoKey is returned by a function made idempotent by Function when
// FunctionConfig.Key gave an empty key: the function did not run.
var ErrNoKey = errors.New("idempotency: the input has no idempotency key")

// ErrBatchFailed is returned by a handler of SQSHandler when no record of the
// batch succeeded, with a response naming every record. So the whole batch is
// retried even where ReportBatchItemFailures was left off.
var ErrBatchFailed = errors.New("idempotency: every record of the batch failed")

// ErrNoTenant is returned by a Function call without a tenant when
// Settings.RequireTenant is set: the function did not run.
var ErrNoTenant = errors.New("idempotency: the call has no tenant, and Settings.RequireTenant is set")
