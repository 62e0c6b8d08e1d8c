package taskfn

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TaskActivityFunction is the SAM logical id of the function that reads
// the task-events queue and records one activity entry per task event.
const TaskActivityFunction = "TaskActivityFunction"

// ActivityFunctionName names the activity function's idempotency records
// (idempotency.FunctionConfig.Name): keep it when renaming the function,
// or every event already recorded would be recorded again.
const ActivityFunctionName = "task-activity"

// ActivityHandler returns the TaskActivityFunction's handler: each record
// of an SQS batch is a task event (tasks.Event) whose activity entry is
// written exactly once, keyed by the event's own event_id and scoped to its
// user, so that a resend of the event with a new message id is skipped too.
//
// With the PostgreSQL key store the event's idempotency record is completed
// in the same transaction as the entry (pgstore's CompleteRunInTx), so no
// crash can leave the entry written and the key open; with Redis the entry
// commits first and the unique (user_id, event_id) index keeps a repeat
// after a lost completion from writing a second entry.
//
// A body that is not a valid task event fails its record, which goes to
// the dead-letter queue after the queue's maxReceiveCount; so does an event
// id seen before with another body.
func (f *Functions) ActivityHandler() (idempotency.SQSBatchHandler, error) {
	pg, atomic := f.store.(*pgstore.Store)
	return idempotency.SQSHandler(func(ctx context.Context, m events.SQSMessage) error {
		ev, err := tasks.ParseEvent([]byte(m.Body))
		if err != nil {
			return err
		}
		tx, err := f.pool.Begin(ctx)
		if err != nil {
			return fmt.Errorf("taskfn: begin: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if _, err := tasks.RecordActivity(ctx, tx, ev); err != nil {
			return err
		}
		if atomic {
			if _, err := pg.CompleteRunInTx(ctx, tx, struct{}{}); err != nil {
				return err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return fmt.Errorf("taskfn: commit: %w", err)
		}
		return nil
	}, idempotency.FunctionConfig[events.SQSMessage]{
		Store: f.store,
		Name:  ActivityFunctionName,
		Key: idempotency.SQSBodyKey(func(ev tasks.Event) string {
			return ev.EventID
		}),
		Scope: func(_ context.Context, m events.SQSMessage) (string, error) {
			ev, err := tasks.ParseEvent([]byte(m.Body))
			return ev.UserID, err
		},
		Payload: idempotency.SQSBody,
		Settings: idempotency.Settings{
			TTL:      f.ttl,
			Logger:   f.logger,
			Metrics:  f.metrics,
			Observer: f.observer,
		},
	})
}

// ServeActivity is the whole of the TaskActivityFunction's main: it builds
// the functions from the environment once, at cold start (see Build), and
// serves the queue's batches until the execution environment ends. It
// returns only when the function cannot start.
func ServeActivity(ctx context.Context, getenv func(string) string) error {
	fns, err := Build(ctx, getenv)
	if err != nil {
		return err
	}
	h, err := fns.ActivityHandler()
	if err != nil {
		fns.Close()
		return fmt.Errorf("taskfn: %w", err)
	}
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(fns.Close))
	return nil
}
