package tasks

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// DB is what the repository needs of a connection. *pgxpool.Pool, *pgx.Conn
// and pgx.Tx all satisfy it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Repository reads and writes the tasks table. Every statement filters on
// the owning user. Parameters carry explicit casts and no statement depends
// on session state, so the queries run unchanged in every pgx query mode,
// including the simple protocol behind a transaction-pooling proxy.
// Timestamps come from the database's clock, never a Lambda's, so tasks
// created by different execution environments order consistently; the one
// exception is the atomic create (API Options.Keys, ADR 0098), which makes
// a task's id and creation time itself so that its answer is known before
// the insert is sent.
//
// Errors: ErrNotFound when no row of the user matches; *DBError for every
// failure of the database.
type Repository struct {
	db DB
}

// NewRepository returns a repository on db.
func NewRepository(db DB) *Repository {
	return &Repository{db: db}
}

// taskColumns is the select list that scanTask reads.
const taskColumns = `id::text, title, description, status, due_date, created_at, updated_at`

func scanTask(row pgx.Row, extra ...any) (Task, error) {
	var (
		t      Task
		status string
		due    pgtype.Date
	)
	dest := append([]any{&t.ID, &t.Title, &t.Description, &status, &due, &t.CreatedAt, &t.UpdatedAt}, extra...)
	if err := row.Scan(dest...); err != nil {
		return Task{}, err
	}
	t.Status = Status(status)
	if due.Valid {
		d := DateOf(due.Time)
		t.DueDate = &d
	}
	t.CreatedAt = t.CreatedAt.UTC()
	t.UpdatedAt = t.UpdatedAt.UTC()
	return t, nil
}

func dateParam(d *Date) *string {
	if d == nil {
		return nil
	}
	s := d.String()
	return &s
}

func dbError(op string, err error) error {
	if errors.Is(err, pgx.ErrNoRows) {
		return ErrNotFound
	}
	return &DBError{Op: op, Err: err}
}

// Insert creates a task for userID. With a non-nil ref the row records the
// Idempotency-Key and fingerprint; if the user already has a row with that
// key nothing is inserted and inserted is false.
func (r *Repository) Insert(ctx context.Context, userID string, in NewTask, ref *IdempotencyRef) (t Task, inserted bool, err error) {
	var key, hash *string
	if ref != nil {
		key, hash = &ref.Key, &ref.Fingerprint
	}
	status := in.Status
	if status == "" {
		status = StatusTodo
	}
	row := r.db.QueryRow(ctx, `
		INSERT INTO tasks (user_id, title, description, status, due_date, idempotency_key, idempotency_request_hash)
		VALUES ($1::uuid, $2::text, $3::text, $4::text, $5::date, $6::text, $7::text)
		ON CONFLICT (user_id, idempotency_key) DO NOTHING
		RETURNING `+taskColumns,
		userID, in.Title, in.Description, string(status), dateParam(in.DueDate), key, hash)
	t, err = scanTask(row)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // the key is already on another row
		return Task{}, false, nil
	case err != nil:
		return Task{}, false, dbError("insert", err)
	}
	return t, true, nil
}

// FindByKey returns the user's task created with the Idempotency-Key key and
// the fingerprint recorded with it.
func (r *Repository) FindByKey(ctx context.Context, userID, key string) (Task, string, error) {
	var hash string
	t, err := scanTask(r.db.QueryRow(ctx, `
		SELECT `+taskColumns+`, idempotency_request_hash
		FROM tasks
		WHERE user_id = $1::uuid AND idempotency_key = $2::text`,
		userID, key), &hash)
	if err != nil {
		return Task{}, "", dbError("find by key", err)
	}
	return t, hash, nil
}

// Get returns the user's task id.
func (r *Repository) Get(ctx context.Context, userID, id string) (Task, error) {
	t, err := scanTask(r.db.QueryRow(ctx, `
		SELECT `+taskColumns+`
		FROM tasks
		WHERE id = $1::uuid AND user_id = $2::uuid`,
		id, userID))
	if err != nil {
		return Task{}, dbError("get", err)
	}
	return t, nil
}

// List returns up to limit of the user's tasks, newest first (ties on
// created_at broken by id, descending), after the position when it is not
// nil. Both forms are served by the index tasks_user_created.
func (r *Repository) List(ctx context.Context, userID string, after *Position, limit int) ([]Task, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if after == nil {
		rows, err = r.db.Query(ctx, `
			SELECT `+taskColumns+`
			FROM tasks
			WHERE user_id = $1::uuid
			ORDER BY created_at DESC, id DESC
			LIMIT $2::int`,
			userID, limit)
	} else {
		rows, err = r.db.Query(ctx, `
			SELECT `+taskColumns+`
			FROM tasks
			WHERE user_id = $1::uuid AND (created_at, id) < ($2::timestamptz, $3::uuid)
			ORDER BY created_at DESC, id DESC
			LIMIT $4::int`,
			userID, after.CreatedAt, after.ID, limit)
	}
	if err != nil {
		return nil, dbError("list", err)
	}
	defer rows.Close()
	out := []Task{}
	for rows.Next() {
		t, err := scanTask(rows)
		if err != nil {
			return nil, dbError("list", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("list", err)
	}
	return out, nil
}

// Update applies p to the user's task id and returns the task as updated.
// updated_at moves to the database's now(), and never backwards: a clock
// that stepped back still leaves it at least a microsecond later.
func (r *Repository) Update(ctx context.Context, userID, id string, p Patch) (Task, error) {
	var status *string
	if p.Status != nil {
		s := string(*p.Status)
		status = &s
	}
	t, err := scanTask(r.db.QueryRow(ctx, `
		UPDATE tasks SET
			title       = CASE WHEN $3::bool THEN $4::text ELSE title END,
			description = CASE WHEN $5::bool THEN $6::text ELSE description END,
			status      = CASE WHEN $7::bool THEN $8::text ELSE status END,
			due_date    = CASE WHEN $9::bool THEN $10::date ELSE due_date END,
			updated_at  = greatest(now(), updated_at + interval '1 microsecond')
		WHERE id = $1::uuid AND user_id = $2::uuid
		RETURNING `+taskColumns,
		id, userID,
		p.Title != nil, p.Title,
		p.Description != nil || p.ClearDescription, p.Description,
		status != nil, status,
		p.DueDate != nil || p.ClearDueDate, dateParam(p.DueDate)))
	if err != nil {
		return Task{}, dbError("update", err)
	}
	return t, nil
}

// Delete removes the user's task id. With a non-nil ref the deletion is
// recorded with the request's Idempotency-Key and fingerprint, in the same
// statement (migrations/00005).
func (r *Repository) Delete(ctx context.Context, userID, id string, ref *IdempotencyRef) error {
	var (
		tag pgconn.CommandTag
		err error
	)
	if ref == nil {
		tag, err = r.db.Exec(ctx, `DELETE FROM tasks WHERE id = $1::uuid AND user_id = $2::uuid`, id, userID)
	} else {
		tag, err = r.db.Exec(ctx, `
			WITH gone AS (
				DELETE FROM tasks WHERE id = $1::uuid AND user_id = $2::uuid RETURNING id
			)
			INSERT INTO task_deletions (user_id, task_id, idempotency_key, idempotency_request_hash)
			SELECT $2::uuid, id, $3::text, $4::text FROM gone`,
			id, userID, ref.Key, ref.Fingerprint)
	}
	if err != nil {
		return dbError("delete", err)
	}
	if tag.RowsAffected() == 0 {
		return ErrNotFound
	}
	return nil
}

// FindDeletion returns the Idempotency-Key and fingerprint of the request
// that deleted the user's task id, or ErrNotFound when no keyed request did.
func (r *Repository) FindDeletion(ctx context.Context, userID, id string) (IdempotencyRef, error) {
	var ref IdempotencyRef
	err := r.db.QueryRow(ctx, `
		SELECT idempotency_key, idempotency_request_hash FROM task_deletions
		WHERE user_id = $1::uuid AND task_id = $2::uuid`,
		userID, id).Scan(&ref.Key, &ref.Fingerprint)
	if err != nil {
		return IdempotencyRef{}, dbError("find deletion", err)
	}
	return ref, nil
}
