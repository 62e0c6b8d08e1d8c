package tasks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// EventKind is what happened to a task.
type EventKind string

// The kinds of task events.
const (
	EventCreated EventKind = "created"
	EventUpdated EventKind = "updated"
	EventDeleted EventKind = "deleted"
)

// Event is a task event as the task-events queue carries it: the body of
// one SQS message, JSON.
type Event struct {
	// EventID is the producer's id of the event, the same in every copy of
	// it (a resend, an SNS fan-out): what makes two messages one event.
	EventID string `json:"event_id"`
	// UserID owns the task, a UUID.
	UserID string `json:"user_id"`
	// TaskID is the task, a UUID.
	TaskID string `json:"task_id"`
	// Kind is created, updated or deleted.
	Kind EventKind `json:"kind"`
	// OccurredAt is when it happened (RFC 3339).
	OccurredAt time.Time `json:"occurred_at"`
}

// ErrInvalidEvent is matched by every error of ParseEvent.
var ErrInvalidEvent = errors.New("tasks: invalid task event")

// ParseEvent decodes and checks a task event. Unknown fields are refused,
// so that a producer's typo is not taken for an event without it; the ids
// are returned in lower case.
func ParseEvent(body []byte) (Event, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var ev Event
	if err := dec.Decode(&ev); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrInvalidEvent, err)
	}
	if dec.More() {
		return Event{}, fmt.Errorf("%w: more than one JSON value", ErrInvalidEvent)
	}
	var problems []error
	if n := len(ev.EventID); n == 0 || n > 200 {
		problems = append(problems, errors.New("event_id must hold 1 to 200 characters"))
	}
	var ok bool
	if ev.UserID, ok = ParseID(ev.UserID); !ok {
		problems = append(problems, errors.New("user_id must be a UUID"))
	}
	if ev.TaskID, ok = ParseID(ev.TaskID); !ok {
		problems = append(problems, errors.New("task_id must be a UUID"))
	}
	switch ev.Kind {
	case EventCreated, EventUpdated, EventDeleted:
	default:
		problems = append(problems, fmt.Errorf("kind is %q: use created, updated or deleted", ev.Kind))
	}
	if ev.OccurredAt.IsZero() {
		problems = append(problems, errors.New("occurred_at is missing"))
	}
	if len(problems) > 0 {
		return Event{}, fmt.Errorf("%w: %w", ErrInvalidEvent, errors.Join(problems...))
	}
	return ev, nil
}

// Activity is one entry of a task's activity log.
type Activity struct {
	EventID    string    `json:"event_id"`
	TaskID     string    `json:"task_id"`
	Kind       EventKind `json:"kind"`
	OccurredAt time.Time `json:"occurred_at"`
	RecordedAt time.Time `json:"recorded_at"`
}

// RecordActivity writes the activity entry of ev through db (typically a
// transaction that also completes the event's idempotency record). It
// reports false, and writes nothing, when the user's log already holds the
// event: the last line of defence when the key store has forgotten it.
//
// Errors: *DBError for every failure of the database.
func RecordActivity(ctx context.Context, db DB, ev Event) (inserted bool, err error) {
	tag, err := db.Exec(ctx, `
		INSERT INTO task_activity (event_id, user_id, task_id, kind, occurred_at)
		VALUES ($1::text, $2::uuid, $3::uuid, $4::text, $5::timestamptz)
		ON CONFLICT (user_id, event_id) DO NOTHING`,
		ev.EventID, ev.UserID, ev.TaskID, string(ev.Kind), ev.OccurredAt)
	if err != nil {
		return false, dbError("record activity", err)
	}
	return tag.RowsAffected() == 1, nil
}

// TaskActivity returns the activity log of one of the user's tasks, oldest
// first.
//
// Errors: *DBError for every failure of the database.
func TaskActivity(ctx context.Context, db DB, userID, taskID string) ([]Activity, error) {
	rows, err := db.Query(ctx, `
		SELECT event_id, task_id::text, kind, occurred_at, recorded_at FROM task_activity
		WHERE user_id = $1::uuid AND task_id = $2::uuid
		ORDER BY occurred_at, recorded_at, event_id`, userID, taskID)
	if err != nil {
		return nil, dbError("list activity", err)
	}
	defer rows.Close()
	out := []Activity{}
	for rows.Next() {
		var a Activity
		var kind string
		if err := rows.Scan(&a.EventID, &a.TaskID, &kind, &a.OccurredAt, &a.RecordedAt); err != nil {
			return nil, dbError("list activity", err)
		}
		a.Kind = EventKind(kind)
		a.OccurredAt, a.RecordedAt = a.OccurredAt.UTC(), a.RecordedAt.UTC()
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("list activity", err)
	}
	return out, nil
}
