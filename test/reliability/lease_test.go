package reliability

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// TestKilledWorker kills (SIGKILL) a worker process that has claimed a key
// and not completed it: the key answers 409 while the lease lasts, then a
// retry runs exactly once. "before" is killed before the task is
// inserted, "after" once the task is inserted but the key not completed; in
// both cases there is one task in the end.
func TestKilledWorker(t *testing.T) {
	t.Parallel()
	const maxLease = 3 * time.Second
	for _, block := range []string{"before", "after"} {
		t.Run("killed "+block+" the insert", func(t *testing.T) {
			t.Parallel()
			rounds := scale(1, 5)
			db := apptest.New(t)
			survivor := startWorker(t, modeSpy, workerEnv(db.URL, map[string]string{envMaxLease: maxLease.String()}))
			ctx := context.Background()
			var probes, kills int
			for round := range rounds {
				victim := startWorker(t, modeSpy, workerEnv(db.URL, map[string]string{envMaxLease: maxLease.String(), envBlock: block}))
				user, key := newUser(), newKey()
				c := call{method: http.MethodPost, path: "/tasks", keys: []string{key}, body: taskBody(fmt.Sprintf("killed %s, round %d", block, round))}
				tok := token(t, user)
				go func() { _, _ = send(ctx, victim.URL, c, tok) }() // never answered: the worker dies

				// The victim has claimed the key once its handler runs.
				require.Eventually(t, func() bool { return victim.stats(t, false).Runs["POST "+key] == 1 },
					10*time.Second, 10*time.Millisecond, "the victim never ran the handler")
				var leaseUntil time.Time
				var status string
				require.NoError(t, db.Pool.QueryRow(ctx,
					`SELECT status, lease_expires_at FROM idempotency_keys WHERE user_id = $1 AND key = $2`, user, key).Scan(&status, &leaseUntil))
				require.Equal(t, "in_progress", status)
				if block == "after" {
					require.Eventually(t, func() bool { return tasksWithKey(t, db, user, key) == 1 },
						10*time.Second, 10*time.Millisecond, "the victim never inserted its task")
				}
				victim.kill(t)
				kills++

				// While the lease lasts the key is in use, and the survivor's
				// handler does not run.
				n := 0
				for time.Until(leaseUntil) > 400*time.Millisecond {
					a := do(t, survivor.URL, call{method: c.method, path: c.path, keys: c.keys, body: c.body, sub: user})
					require.Equal(t, http.StatusConflict, a.status, "%s", a.body)
					require.Equal(t, idempotency.CodeKeyInUse, a.problem(t).Code)
					require.Equal(t, "1", a.header.Get("Retry-After"))
					n++
					time.Sleep(150 * time.Millisecond)
				}
				require.Positive(t, n, "no probe fitted inside the lease")
				probes += n
				require.Zero(t, survivor.stats(t, false).Runs["POST "+key])

				// Once it has run out, a retry takes the key over and runs once.
				time.Sleep(time.Until(leaseUntil) + 300*time.Millisecond)
				retry := do(t, survivor.URL, call{method: c.method, path: c.path, keys: c.keys, body: c.body, sub: user})
				require.Equal(t, http.StatusCreated, retry.status, "%s", retry.body)
				if block == "after" {
					// The task the victim inserted records the key (spec §8):
					// the handler finds it and answers it again.
					require.True(t, retry.replayed(), "the retry must answer the victim's task")
				} else {
					require.False(t, retry.replayed())
				}
				require.Equal(t, 1, survivor.stats(t, false).Runs["POST "+key], "the retry runs the handler exactly once")
				again := do(t, survivor.URL, call{method: c.method, path: c.path, keys: c.keys, body: c.body, sub: user})
				require.Equal(t, http.StatusCreated, again.status)
				require.True(t, again.replayed())
				require.True(t, bytes.Equal(retry.body, again.body), "the replay is byte-exact")
				require.Equal(t, 1, tasksWithKey(t, db, user, key), "one task, not two")
				require.Equal(t, retry.taskID(t), taskIDWithKey(t, db, user, key))
			}
			dups := duplicateTasks(t, db.Pool)
			require.Zero(t, dups)
			require.Equal(t, rounds, countRows(t, db.Pool).Tasks)
			record(t, Result{
				Case:  "worker killed between claim and completion (" + block + " the insert)",
				Tried: fmt.Sprintf("a worker process with MaxLease %v claims a key, its create handler blocks %s inserting the task; SIGKILL; the same request to another process during and after the lease", maxLease, block),
				Times: kills,
				Seen: fmt.Sprintf("%d probes during the leases, all 409 idempotency_key_in_use with Retry-After: 1 and no handler run; after each lease one retry ran the handler once (201%s), then byte-exact replays",
					probes, map[bool]string{true: ", the victim's task answered again", false: ""}[block == "after"]),
				Lost: lostSummary(map[string]int{"duplicate tasks": dups}),
			})
		})
	}
}

func tasksWithKey(t testing.TB, db *pgtest.DB, user, key string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM tasks WHERE user_id = $1 AND idempotency_key = $2`, user, key).Scan(&n))
	return n
}

func taskIDWithKey(t testing.TB, db *pgtest.DB, user, key string) string {
	t.Helper()
	var id string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT id::text FROM tasks WHERE user_id = $1 AND idempotency_key = $2`, user, key).Scan(&id))
	return id
}
