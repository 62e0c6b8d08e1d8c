package tasks_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// countingKeys counts the completions queued in the task's own batch; the
// completions the decorator makes itself are counted on the store's pool
// (completeCounter).
type countingKeys struct {
	*pgstore.Store
	batched atomic.Int32
}

func (s *countingKeys) CompleteRunInBatch(ctx context.Context, b *pgx.Batch, result any) (func(context.Context) error, bool, error) {
	s.batched.Add(1)
	return s.Store.CompleteRunInBatch(ctx, b, result)
}

// completeCounter is a pgx.QueryTracer that counts the completions sent as
// statements of their own.
type completeCounter struct{ n atomic.Int32 }

func (c *completeCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.Contains(d.SQL, "idempotency_key_complete") {
		c.n.Add(1)
	}
	return ctx
}

func (c *completeCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countedStore is a store on a pool of its own whose completions c counts.
func countedStore(t *testing.T, url string, c *completeCounter) *pgstore.Store {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return must.Value(pgstore.New(pool, nil))
}

// keyRecord reads the status and stored body of the key's record.
func (e *env) keyRecord(t *testing.T, user, key string) (status, body string, found bool) {
	t.Helper()
	err := e.db.Pool.QueryRow(context.Background(),
		`SELECT status, coalesce(response_body->>'body', '') FROM idempotency_keys WHERE user_id = $1 AND key = $2`, user, key).Scan(&status, &body)
	if err != nil {
		return "", "", false
	}
	return status, body, true
}

// TestAtomicCreate: with Options.Keys the create completes its key in the
// batch that inserts the task, so the decorator makes no completion of its
// own; the stored answer, the replay and a later GET agree byte for byte
// (the id and times the function made are the row's); after the key store
// lost its records the retry finds the task and completes the key with it,
// and another request under the key is refused and leaves the key free.
func TestAtomicCreate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	completes := &completeCounter{}
	store := countedStore(t, e.db.URL, completes)
	keys := &countingKeys{Store: store}
	api := tasks.NewAPI(tasks.NewService(e.db.Pool), &tasks.Options{Logger: e.quietLogger(), Keys: keys})
	create, err := idempotency.Wrap(api.Create, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: e.quietLogger(), Metrics: discard{}}})
	require.NoError(t, err)

	key := uuid.NewString()
	body := `{"title":"pay rent","due_date":"2030-01-01","description":"by the first"}`
	first, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, first.StatusCode, first.Body)
	require.EqualValues(t, 1, keys.batched.Load(), "completed in the insert's batch")
	require.Zero(t, completes.n.Load(), "the decorator did not complete it again")
	status, stored, found := e.keyRecord(t, alice, key)
	require.True(t, found)
	require.Equal(t, "completed", status)
	require.Equal(t, first.Body, stored)

	task := decodeTask(t, first)
	got := e.do(t, alice, "GET", "/tasks/"+task.ID, "")
	require.Equal(t, 200, got.StatusCode)
	require.Equal(t, first.Body, got.Body, "the row holds the id and times the function made")

	replay, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, first.Body, replay.Body)

	// The key store loses its records: the retry's insert conflicts with
	// the task's key, the batch rolls back, the run gives its completion
	// back, and the task is answered and stored as the key's answer.
	e.truncateKeys(t)
	retry, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, retry.StatusCode, retry.Body)
	require.Equal(t, first.Body, retry.Body)
	require.Equal(t, "true", retry.Headers["Idempotent-Replayed"])
	require.Equal(t, 1, e.taskCount(t), "no second task")
	status, stored, found = e.keyRecord(t, alice, key)
	require.True(t, found)
	require.Equal(t, "completed", status, "the key is completed with the existing task")
	require.Equal(t, first.Body, stored)

	e.truncateKeys(t)
	other, err := create(ctx, withKey(request(alice, "POST", "/tasks", `{"title":"pay rent twice"}`), key))
	require.NoError(t, err)
	requireProblem(t, other, 422, idempotency.CodeKeyReused)
	_, _, found = e.keyRecord(t, alice, key)
	require.False(t, found, "the refusal is not stored: the key stays the first request's")
	require.Equal(t, 1, e.taskCount(t))

	// A create without a key (the decorator not in front) goes the usual way.
	plain, err := api.Create(ctx, request(bob, "POST", "/tasks", `{"title":"no key"}`))
	require.NoError(t, err)
	require.Equal(t, 201, plain.StatusCode)
	require.Equal(t, 2, e.taskCount(t))
}

// TestAtomicCreateFailureReleasesTheKey: a batch that fails (a title the
// table refuses) rolls back the insert and the completion together, and the
// decorator releases the key, so a retry runs again.
func TestAtomicCreateFailureReleasesTheKey(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	keys := must.Value(pgstore.New(e.db.Pool, nil))
	api := tasks.NewAPI(tasks.NewService(e.db.Pool), &tasks.Options{Logger: e.quietLogger(), Keys: keys})
	create, err := idempotency.Wrap(api.Create, idempotency.Config{Store: keys, Settings: idempotency.Settings{Logger: e.quietLogger(), Metrics: discard{}}})
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, `ALTER TABLE tasks ADD CONSTRAINT no_doomed CHECK (title <> 'doomed')`)
	require.NoError(t, err)

	key := uuid.NewString()
	resp, err := create(ctx, withKey(request(alice, "POST", "/tasks", `{"title":"doomed"}`), key))
	require.NoError(t, err)
	require.Equal(t, 503, resp.StatusCode, resp.Body)
	require.Equal(t, 0, e.taskCount(t))
	_, _, found := e.keyRecord(t, alice, key)
	require.False(t, found, "released: the retry runs again")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// TestAtomicCreateIsOneTransaction: when the completion fails inside the
// batch (here its function is gone), the insert before it is rolled back
// with it: the task and the key's completion commit together or not at all.
func TestAtomicCreateIsOneTransaction(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	keys := must.Value(pgstore.New(e.db.Pool, nil))
	api := tasks.NewAPI(tasks.NewService(e.db.Pool), &tasks.Options{Logger: e.quietLogger(), Keys: keys})
	create, err := idempotency.Wrap(api.Create, idempotency.Config{Store: keys, Settings: idempotency.Settings{Logger: e.quietLogger(), Metrics: discard{}}})
	require.NoError(t, err)
	_, err = e.db.Pool.Exec(ctx, `ALTER FUNCTION idempotency_key_complete(uuid, text, text, text, integer, timestamptz) RENAME TO moved_away`)
	require.NoError(t, err)

	key := uuid.NewString()
	resp, err := create(ctx, withKey(request(alice, "POST", "/tasks", `{"title":"all or nothing"}`), key))
	require.NoError(t, err)
	require.Equal(t, 503, resp.StatusCode, resp.Body)
	require.Equal(t, 0, e.taskCount(t), "the insert rolled back with the failed completion")
	_, _, found := e.keyRecord(t, alice, key)
	require.False(t, found, "released")
}
