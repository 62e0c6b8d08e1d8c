package tasks

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ichido/ichido/internal/problem"
)

// ErrNotFound is returned when the task does not exist or belongs to another
// user; the two are deliberately indistinguishable.
var ErrNotFound = errors.New("tasks: task not found")

// ErrKeyReused is returned by Service.Create when the task row already
// records the request's Idempotency-Key with another request fingerprint (and
// by Service.Delete when the deletion of the task does): the key was reused
// for a different request after the key store forgot it.
var ErrKeyReused = errors.New("tasks: idempotency key already used for a different request")

// ValidationError lists the fields of a request that are invalid. It is
// answered with 400 validation_failed and the list of fields.
type ValidationError struct {
	// Fields names each invalid field and what is wrong with it.
	Fields []problem.FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Detail
	}
	return "tasks: invalid request: " + strings.Join(parts, "; ")
}

func invalid(field, format string, args ...any) *ValidationError {
	return &ValidationError{Fields: []problem.FieldError{{Field: field, Detail: fmt.Sprintf(format, args...)}}}
}

// DBError wraps a failure of the database (unreachable, timed out, failed).
// It is answered with 503 and Retry-After; its text is logged, never shown.
type DBError struct {
	// Op names the repository operation that failed.
	Op string
	// Err is the driver's error.
	Err error
}

func (e *DBError) Error() string { return "tasks: database " + e.Op + ": " + e.Err.Error() }

// Unwrap returns the driver's error.
func (e *DBError) Unwrap() error { return e.Err }
