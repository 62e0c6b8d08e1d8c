package tasks_test

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestRetriedDeleteAfterLosingKeys: the deletion records its key, so a
// retry after the key store forgot it answers 204 as the first DELETE did,
// not 404; another request under the key, or another key, is not that
// retry.
func TestRetriedDeleteAfterLosingKeys(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	del := e.wrap(t, e.api.Delete)
	task := e.create(t, alice, `{"title":"delete me once"}`)
	target := "/tasks/" + task.ID
	key := uuid.NewString()

	first, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, first.StatusCode, first.Body)

	e.truncateKeys(t)
	retry, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, retry.StatusCode, "the retry answers what the first DELETE did: %s", retry.Body)
	require.Equal(t, "true", retry.Headers["Idempotent-Replayed"])
	require.Empty(t, retry.Body)

	e.truncateKeys(t)
	other, err := del(ctx, withKey(request(alice, "DELETE", target, ""), uuid.NewString()))
	require.NoError(t, err)
	requireProblem(t, other, 404, problem.CodeNotFound)
	reused, err := del(ctx, withKey(request(alice, "DELETE", target+"?force=1", ""), key))
	require.NoError(t, err)
	requireProblem(t, reused, 422, idempotency.CodeKeyReused)
	stranger, err := del(ctx, withKey(request(bob, "DELETE", target, ""), key))
	require.NoError(t, err)
	requireProblem(t, stranger, 404, problem.CodeNotFound)
	// The refusal was not stored: the first DELETE's own retry still gets 204.
	again, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, again.StatusCode, again.Body)
}

// completeFails is a Store whose Complete always fails, as when the key
// store cannot be written after the handler's work is done.
type completeFails struct{ idemstore.Store }

func (completeFails) Complete(context.Context, idemstore.Completion) error {
	return &idemstore.Error{Op: "complete", Err: errors.New("injected: the completion write failed")}
}

// settableClock is a clock the test moves forward.
type settableClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *settableClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *settableClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// TestDeleteWhoseCompletionFailed: the DELETE ran (204) but its completion
// could not be written, so after the lease the retry runs the handler again.
// The task is gone by then; the retry still answers 204, and that, not a
// 404, becomes the key's stored answer.
func TestDeleteWhoseCompletionFailed(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	// An hour in the past: stores decide takeover against the earlier of
	// the caller's clock and their server's, so the clock moves in the past.
	clock := &settableClock{now: time.Now().Add(-time.Hour).UTC()}
	st := must.Value(pgstore.New(e.db.Pool, nil))
	wrap := func(s idemstore.Store) tasks.Handler {
		h, err := idempotency.Wrap(e.api.Delete, idempotency.Config{
			Store: s,
			Settings: idempotency.Settings{Clock: clock.Now, Logger: e.quietLogger(), Metrics: io.Discard,
				FinishTimeout: 200 * time.Millisecond,
			},
		})
		require.NoError(t, err)
		return h
	}
	task := e.create(t, alice, `{"title":"delete me"}`)
	target := "/tasks/" + task.ID
	key := uuid.NewString()

	first, err := wrap(completeFails{st})(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, first.StatusCode, first.Body)

	clock.Advance(idempotency.DefaultMaxLease + time.Minute)
	del := wrap(st)
	retry, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, retry.StatusCode, "not 404: %s", retry.Body)
	stored, err := del(ctx, withKey(request(alice, "DELETE", target, ""), key))
	require.NoError(t, err)
	require.Equal(t, 204, stored.StatusCode, stored.Body)
	require.Equal(t, "true", stored.Headers["Idempotent-Replayed"])
}
