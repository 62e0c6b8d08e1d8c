package tasks

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// KeyCompleter is the idempotency key store that protects Create, as far as
// the atomic create needs it: pgstore.Store. With it,
// Create completes the key in the same implicit transaction, and the same
// round trip, as the insert of the task (Options.Keys).
type KeyCompleter interface {
	CompleteRunInBatch(ctx context.Context, b *pgx.Batch, result any) (func(context.Context) error, bool, error)
}

// batcher is what the atomic create needs of the Service's connection:
// *pgxpool.Pool has it.
type batcher interface {
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// createAtomic is Create when the key can be completed with the insert: the
// task's id and times are made here (the response must be known before the
// batch is sent), the insert and the key's completion go in one batch, one
// implicit transaction, one round trip. done is false when Create must go
// the usual way: the run cannot take over its completion (no protected
// request, a store that cannot complete in a transaction), or the key is on
// another row; nothing was written then.
//
// The insert has no ON CONFLICT: a key already on another row (a retry after
// the key store was lost) fails the batch, which rolls back the completion
// too; the completion goes back to the decorator (CompleteRunInBatch's
// done) and Create goes the usual way, finding the task by its key. A completion
// that finds the lease lost leaves the task committed: its row records the
// key, so the invocation that took the key over finds it and answers it,
// and no second task is made.
func (a *API) createAtomic(ctx context.Context, db batcher, user string, in NewTask, ref *IdempotencyRef) (events.APIGatewayV2HTTPResponse, bool, error) {
	status := in.Status
	if status == "" {
		status = StatusTodo
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	t := Task{ID: uuid.NewString(), Title: in.Title, Description: in.Description, Status: status, DueDate: in.DueDate, CreatedAt: now, UpdatedAt: now}
	resp := createdResponse(t, false)
	b := &pgx.Batch{}
	queueInsert(b, user, t, ref)
	completed, ok, err := a.keys.CompleteRunInBatch(ctx, b, resp)
	switch {
	case err != nil:
		return events.APIGatewayV2HTTPResponse{}, true, err // released by the decorator: nothing was sent
	case !ok:
		return events.APIGatewayV2HTTPResponse{}, false, nil
	}
	err = db.SendBatch(ctx, b).Close()
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UniqueViolation && pgErr.ConstraintName == "tasks_user_idempotency_key":
		// Nothing was written, and completed gives the completion back:
		// the decorator completes (or, for another request's key,
		// releases) the record with Create's usual answer.
		_ = completed(ctx)
		return events.APIGatewayV2HTTPResponse{}, false, nil
	case err != nil:
		_ = completed(ctx)
		return events.APIGatewayV2HTTPResponse{}, true, &DBError{Op: "insert", Err: err} // rolled back: released
	}
	if err := completed(ctx); err != nil {
		// The task is committed; the key is another invocation's, which
		// finds the task by its key (see above).
		a.log.WarnContext(ctx, "tasks: the task was created but its idempotency key was not completed", "task_id", t.ID, "error", err.Error())
	}
	return resp, true, nil
}

// createdResponse is Create's 201 for t.
func createdResponse(t Task, replayed bool) events.APIGatewayV2HTTPResponse {
	resp := jsonResponse(http.StatusCreated, t)
	resp.Headers["Location"] = "/tasks/" + t.ID
	if replayed {
		resp.Headers["Idempotent-Replayed"] = "true"
	}
	return resp
}

// queueInsert queues the insert of t, with its id and times, for userID
// with the key of ref; it fails the batch when the key is on another row.
func queueInsert(b *pgx.Batch, userID string, t Task, ref *IdempotencyRef) {
	b.Queue(`
		INSERT INTO tasks (id, user_id, title, description, status, due_date, created_at, updated_at, idempotency_key, idempotency_request_hash)
		VALUES ($1::uuid, $2::uuid, $3::text, $4::text, $5::text, $6::date, $7::timestamptz, $7::timestamptz, $8::text, $9::text)`,
		t.ID, userID, t.Title, t.Description, string(t.Status), dateParam(t.DueDate), t.CreatedAt, ref.Key, ref.Fingerprint)
}
