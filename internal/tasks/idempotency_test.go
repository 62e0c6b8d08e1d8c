package tasks_test

import (
	"context"
	"io"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// wrap protects h with the decorator over the test's PostgreSQL store.
func (e *env) wrap(t *testing.T, h tasks.Handler) tasks.Handler {
	t.Helper()
	wrapped, err := idempotency.Wrap(h, idempotency.Config{
		Store: must.Value(pgstore.New(e.db.Pool, nil)),
		Settings: idempotency.Settings{
			Logger:  e.quietLogger(),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	return wrapped
}

func withKey(req events.APIGatewayV2HTTPRequest, key string) events.APIGatewayV2HTTPRequest {
	req.Headers["idempotency-key"] = key
	return req
}

func (e *env) truncateKeys(t *testing.T) {
	t.Helper()
	_, err := e.db.Pool.Exec(context.Background(), `TRUNCATE idempotency_keys`)
	require.NoError(t, err)
}

// TestNoDuplicateAfterLosingKeys is spec §8: the task row records the key,
// so a retry after the key store lost its records (an UNLOGGED table is
// emptied by a crash) answers the task it created instead of a second one,
// and a different request under the same key is still refused.
func TestNoDuplicateAfterLosingKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	create := e.wrap(t, e.api.Create)
	key := uuid.NewString()
	body := `{"title":"pay rent","due_date":"2030-01-01"}`

	first, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, first.StatusCode, first.Body)
	task := decodeTask(t, first)

	replay, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"], "the key store answers while it has the key")
	require.Equal(t, first.Body, replay.Body)

	e.truncateKeys(t)
	// The same object, serialised differently, is the same request.
	retry, err := create(ctx, withKey(request(alice, "POST", "/tasks", `{ "due_date": "2030-01-01", "title": "pay rent" }`), key))
	require.NoError(t, err)
	require.Equal(t, 201, retry.StatusCode, retry.Body)
	require.Equal(t, first.Body, retry.Body, "the retry answers the task the first request created")
	require.Equal(t, first.Headers["Location"], retry.Headers["Location"])
	require.Equal(t, first.Headers["Content-Type"], retry.Headers["Content-Type"])
	require.Equal(t, "true", retry.Headers["Idempotent-Replayed"])
	require.Equal(t, 1, e.taskCount(t), "no second task")

	e.truncateKeys(t)
	other, err := create(ctx, withKey(request(alice, "POST", "/tasks", `{"title":"pay rent twice"}`), key))
	require.NoError(t, err)
	requireProblem(t, other, 422, idempotency.CodeKeyReused)
	require.Equal(t, 1, e.taskCount(t))
	// That refusal did not become the key's answer: the original request's
	// own retry still gets its task.
	original, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, original.StatusCode, original.Body)
	require.Equal(t, first.Body, original.Body)
	require.Equal(t, 1, e.taskCount(t))

	// Keys are per user: bob's request under the same key is his own.
	bobs, err := create(ctx, withKey(request(bob, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, bobs.StatusCode, bobs.Body)
	require.NotEqual(t, task.ID, decodeTask(t, bobs).ID)
	require.Empty(t, bobs.Headers["Idempotent-Replayed"])
	require.Equal(t, 2, e.taskCount(t))

	// Once the task is deleted, the key names nothing: a retry after the key
	// store was lost creates the task again.
	require.Equal(t, 204, e.do(t, alice, "DELETE", "/tasks/"+task.ID, "").StatusCode)
	e.truncateKeys(t)
	again, err := create(ctx, withKey(request(alice, "POST", "/tasks", body), key))
	require.NoError(t, err)
	require.Equal(t, 201, again.StatusCode, again.Body)
	require.NotEqual(t, task.ID, decodeTask(t, again).ID)
}

// TestProtectedMutations runs PATCH and DELETE through the decorator: a
// retry replays, another user's task stays a 404 and unchanged.
func TestProtectedMutations(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	update, del := e.wrap(t, e.api.Update), e.wrap(t, e.api.Delete)
	task := e.create(t, alice, `{"title":"wrapped"}`)
	target := "/tasks/" + task.ID

	key := uuid.NewString()
	first, err := update(ctx, withKey(request(alice, "PATCH", target, `{"status":"done"}`), key))
	require.NoError(t, err)
	require.Equal(t, 200, first.StatusCode, first.Body)
	again, err := update(ctx, withKey(request(alice, "PATCH", target, `{"status":"done"}`), key))
	require.NoError(t, err)
	require.Equal(t, first.Body, again.Body)
	require.Equal(t, "true", again.Headers["Idempotent-Replayed"])

	for _, c := range []struct {
		h            tasks.Handler
		method, body string
	}{{update, "PATCH", `{"title":"stolen"}`}, {del, "DELETE", ""}} {
		resp, err := c.h(ctx, withKey(request(bob, c.method, target, c.body), uuid.NewString()))
		require.NoError(t, err)
		requireProblem(t, resp, 404, problem.CodeNotFound)
	}
	require.Equal(t, decodeTask(t, first), decodeTask(t, e.do(t, alice, "GET", target, "")), "unchanged by bob")

	key = uuid.NewString()
	gone, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, gone.StatusCode)
	replayed, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, replayed.StatusCode, "a retried delete replays its 204, not a 404")
	require.Equal(t, 0, e.taskCount(t))
}

// TestQueryModes runs the repository in the query modes a connection
// through a transaction-pooling proxy uses: no statement may depend on a
// prepared statement's described types.
func TestQueryModes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, mode := range []string{"exec", "simple_protocol"} {
		t.Run(mode, func(t *testing.T) {
			u, err := url.Parse(e.db.URL)
			require.NoError(t, err)
			q := u.Query()
			q.Set("default_query_exec_mode", mode)
			u.RawQuery = q.Encode()
			pool, err := pgxpool.New(context.Background(), u.String())
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			m := &env{db: e.db, api: tasks.NewAPI(tasks.NewService(pool), &tasks.Options{Logger: e.quietLogger()})}
			user := uuid.NewString()
			ctx := idempotency.NewContext(context.Background(), idempotency.Info{Key: uuid.NewString(), UserID: user, Fingerprint: "h-" + mode})

			a := m.create(t, user, `{"title":"one","description":"d","status":"done","due_date":"2029-02-28"}`)
			b := m.create(t, user, `{"title":"two"}`)
			resp, err := m.api.Create(ctx, request(user, "POST", "/tasks", `{"title":"keyed"}`))
			require.NoError(t, err)
			require.Equal(t, 201, resp.StatusCode, resp.Body)
			again, err := m.api.Create(ctx, request(user, "POST", "/tasks", `{"title":"keyed"}`))
			require.NoError(t, err)
			require.Equal(t, resp.Body, again.Body)
			keyed := decodeTask(t, resp)

			all, _ := m.walk(t, user, 1)
			require.Equal(t, []string{keyed.ID, b.ID, a.ID}, ids(all))
			require.Equal(t, a, decodeTask(t, m.do(t, user, "GET", "/tasks/"+a.ID, "")))
			patched := decodeTask(t, m.do(t, user, "PATCH", "/tasks/"+a.ID, `{"description":null,"due_date":"2030-03-03","status":"todo"}`))
			require.Nil(t, patched.Description)
			require.Equal(t, "2030-03-03", patched.DueDate.String())
			require.Equal(t, tasks.StatusTodo, patched.Status)
			require.Equal(t, 204, m.do(t, user, "DELETE", "/tasks/"+a.ID, "").StatusCode)
			requireProblem(t, m.do(t, user, "GET", "/tasks/"+a.ID, ""), 404, problem.CodeNotFound)
		})
	}
}
