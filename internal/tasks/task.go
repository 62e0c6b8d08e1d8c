// Package tasks is the sample task API of the project: a service over a
// PostgreSQL repository (pgx v5) and the API Gateway HTTP API (v2 payload)
// handlers that expose it.
//
// A task belongs to the user named by the JWT authorizer's `sub` claim; every
// query filters on that user, so another user's task is indistinguishable
// from one that does not exist (404, never 403).
//
// The mutating handlers (Create, Update, Delete) are meant to run behind
// idempotency.Wrap. Create also records the request's Idempotency-Key and
// fingerprint on the task row (a logged, unique column), so that a retry that
// arrives after the key store lost its records finds the task instead of
// creating a second one.
//
// Every error a handler answers is application/problem+json (package
// problem); handlers never return a Go error, because API Gateway turns a Go
// error into a bare 502.
package tasks

import (
	"encoding/json"
	"fmt"
	"time"
)

// Status is the progress of a task.
type Status string

// The statuses a task can have.
const (
	StatusTodo       Status = "todo"
	StatusInProgress Status = "in_progress"
	StatusDone       Status = "done"
)

// Valid reports whether s is one of the known statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusTodo, StatusInProgress, StatusDone:
		return true
	}
	return false
}

// Limits of a task's fields, in characters (Unicode code points, as
// PostgreSQL's char_length counts them).
const (
	MaxTitleLength       = 200
	MaxDescriptionLength = 2000
)

// Date is a calendar date without a time zone, written YYYY-MM-DD.
type Date struct {
	Year  int
	Month time.Month
	Day   int
}

const dateLayout = "2006-01-02"

// ParseDate parses a YYYY-MM-DD date and refuses any other form or an
// impossible day (2025-02-30).
func ParseDate(s string) (Date, error) {
	t, err := time.Parse(dateLayout, s)
	if err != nil || len(s) != len(dateLayout) {
		return Date{}, fmt.Errorf("tasks: %q is not a date in the form YYYY-MM-DD", s)
	}
	return DateOf(t), nil
}

// DateOf returns the calendar date of t in t's location.
func DateOf(t time.Time) Date {
	y, m, d := t.Date()
	return Date{Year: y, Month: m, Day: d}
}

// String returns the date as YYYY-MM-DD.
func (d Date) String() string {
	return fmt.Sprintf("%04d-%02d-%02d", d.Year, int(d.Month), d.Day)
}

// MarshalJSON writes the date as a "YYYY-MM-DD" string.
func (d Date) MarshalJSON() ([]byte, error) {
	return json.Marshal(d.String())
}

// UnmarshalJSON reads a "YYYY-MM-DD" string.
func (d *Date) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	p, err := ParseDate(s)
	if err != nil {
		return err
	}
	*d = p
	return nil
}

// Task is a user's task as the API shows it. Description and DueDate are
// null in JSON when unset; the timestamps are RFC 3339 in UTC.
type Task struct {
	// ID is the task's UUID, lower case.
	ID string `json:"id"`
	// Title is 1 to MaxTitleLength characters.
	Title string `json:"title"`
	// Description is at most MaxDescriptionLength characters; nil when unset.
	Description *string `json:"description"`
	// Status is the task's progress.
	Status Status `json:"status"`
	// DueDate is nil when unset.
	DueDate *Date `json:"due_date"`
	// CreatedAt is when the task was created: the database's clock, or the
	// function's when the create completes its key in its own batch
	// (Options.Keys, ADR 0098).
	CreatedAt time.Time `json:"created_at"`
	// UpdatedAt is when the task last changed; it never goes backwards.
	UpdatedAt time.Time `json:"updated_at"`
}

// NewTask is the input of a create.
type NewTask struct {
	// Title is required.
	Title string
	// Description is optional (nil).
	Description *string
	// Status defaults to StatusTodo when empty.
	Status Status
	// DueDate is optional (nil).
	DueDate *Date
}

// Patch is a partial update: a nil field is left unchanged. Description and
// DueDate can also be cleared.
type Patch struct {
	Title            *string
	Description      *string
	ClearDescription bool
	Status           *Status
	DueDate          *Date
	ClearDueDate     bool
}

// Empty reports whether the patch changes nothing.
func (p Patch) Empty() bool {
	return p.Title == nil && p.Description == nil && !p.ClearDescription &&
		p.Status == nil && p.DueDate == nil && !p.ClearDueDate
}

// IdempotencyRef is the Idempotency-Key and request fingerprint that a create
// records on the task row.
type IdempotencyRef struct {
	// Key is the Idempotency-Key, lower case.
	Key string
	// Fingerprint is the request's fingerprint as the decorator computed it.
	Fingerprint string
}
