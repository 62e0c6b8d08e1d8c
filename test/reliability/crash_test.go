package reliability

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// privateCluster starts a PostgreSQL cluster of the test's own, which it
// may crash and stop, with the migrations applied; it is destroyed when
// the test ends.
func privateCluster(t *testing.T) (*pgtest.Cluster, *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	cl, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: filepath.Join(t.TempDir(), "data")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Destroy() })
	pool, err := pgxpool.New(ctx, cl.URL(""))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_cron")
	require.NoError(t, err)
	_, err = migrate.Up(ctx, pool)
	require.NoError(t, err)
	return cl, pool
}

// startWorkers starts n spy workers on the database at url.
func startWorkers(t *testing.T, n int, url string) []*worker {
	t.Helper()
	workers := make([]*worker, n)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { workers[i] = startWorker(t, modeSpy, workerEnv(url, nil)) })
	}
	wg.Wait()
	for _, w := range workers {
		require.NotNil(t, w, "a worker did not start")
	}
	return workers
}

// awaitService sends GET /tasks to every worker until each answers 200,
// within a bound; it returns how many answers were not 200 (each must be a
// 503 problem). The workers are not restarted: their pools must recover.
func awaitService(t *testing.T, workers []*worker, user string) (unavailable int) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for _, w := range workers {
		for {
			a := do(t, w.URL, call{method: http.MethodGet, path: "/tasks?limit=1", sub: user})
			if a.status == http.StatusOK {
				break
			}
			require.Equal(t, http.StatusServiceUnavailable, a.status, "%s", a.body)
			a.problem(t)
			unavailable++
			require.True(t, time.Now().Before(deadline), "the service did not recover within 60s")
			time.Sleep(100 * time.Millisecond)
		}
	}
	return unavailable
}

// sumRuns adds up the handler runs the workers counted.
func sumRuns(t *testing.T, workers []*worker) map[string]int {
	t.Helper()
	runs := map[string]int{}
	for _, w := range workers {
		for k, v := range w.stats(t, false).Runs {
			runs[k] += v
		}
	}
	return runs
}

func pids(t *testing.T, workers []*worker) []int {
	t.Helper()
	var out []int
	for _, w := range workers {
		out = append(out, w.stats(t, false).PID)
	}
	return out
}

// sent is a create that was answered, kept to be retried.
type sent struct {
	c     call
	first answer
}

// TestPostgresCrash crashes PostgreSQL (pg_ctl stop -m immediate, then
// start) under running worker processes: they recover without a restart;
// on vanilla PostgreSQL the UNLOGGED key table is empty afterwards while
// the tasks are intact; retries of the creates that had completed get
// their existing task (spec §8), never a second one.
func TestPostgresCrash(t *testing.T) {
	t.Parallel()
	cycles := scale(1, 3)
	perCycle := scale(20, 50)
	ctx := context.Background()
	cl, pool := privateCluster(t)
	workers := startWorkers(t, 2, cl.URL(""))
	startPIDs := pids(t, workers)
	user := newUser()

	var all []sent
	var unavailable, retries, probes int
	for cycle := range cycles {
		for i := range perCycle {
			c := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: user,
				body: taskBody(fmt.Sprintf("cycle %d, task %d", cycle, i))}
			a := do(t, workers[i%len(workers)].URL, c)
			require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
			all = append(all, sent{c: c, first: a})
		}
		// A key kept only to be reused with another body after the crash.
		probe := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: user, body: taskBody(fmt.Sprintf("cycle %d, probe", cycle))}
		probeFirst := do(t, workers[0].URL, probe)
		require.Equal(t, http.StatusCreated, probeFirst.status)
		probes++

		before := countRows(t, pool)
		require.Equal(t, len(all)+probes, before.Tasks)
		// Every completed create has its key record; so do this cycle's
		// probe and, after a first crash, the previous probe (its retry
		// recorded it again).
		wantKeys := len(all) + 1
		if cycle > 0 {
			wantKeys++
		}
		require.Equal(t, wantKeys, before.Keys, "every completed request has its key record")

		require.NoError(t, cl.Stop(ctx, "immediate"))
		require.NoError(t, cl.Start(ctx))
		pool.Reset() // the test's own connections died with the server
		unavailable += awaitService(t, workers, user)

		after := countRows(t, pool)
		require.Zero(t, after.Keys, "vanilla PostgreSQL empties an UNLOGGED table after a crash")
		require.Equal(t, before.Tasks, after.Tasks, "the tasks table is logged and intact")

		runsBefore := sumRuns(t, workers)
		for i, s := range all {
			a := do(t, workers[(i+1)%len(workers)].URL, s.c)
			require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
			require.True(t, a.replayed(), "the handler found the task holding the key")
			require.True(t, bytes.Equal(s.first.body, a.body), "the retry answers the same task, byte for byte:\n%s\n%s", s.first.body, a.body)
			require.Equal(t, s.first.header.Get("Location"), a.header.Get("Location"))
			retries++
		}
		runsAfter := sumRuns(t, workers)
		for _, s := range all {
			k := "POST " + s.c.keys[0]
			require.Equal(t, 1, runsAfter[k]-runsBefore[k], "one run per retry")
		}
		// The same key with another body, after the key store forgot it: the
		// task's recorded fingerprint refuses it.
		reuse := probe
		reuse.body = taskBody("another body")
		a := do(t, workers[1].URL, reuse)
		require.Equal(t, http.StatusUnprocessableEntity, a.status, "%s", a.body)
		require.Equal(t, idempotency.CodeKeyReused, a.problem(t).Code)
		// That 422 is not stored as the key's answer (ADR 0072), so the
		// original request's retry still gets its task, byte for byte.
		orig := do(t, workers[0].URL, probe)
		require.Equal(t, http.StatusCreated, orig.status, "%s", orig.body)
		require.True(t, bytes.Equal(probeFirst.body, orig.body), "the original retry answers its task:\n%s\n%s", probeFirst.body, orig.body)

		end := countRows(t, pool)
		require.Equal(t, before.Tasks, end.Tasks, "no retry created a task")
		require.Equal(t, len(all)+1, end.Keys, "the retries recorded their keys again")
		require.Zero(t, duplicateTasks(t, pool))

		// The key store works again: a new create runs, its retry replays.
		fresh := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: user, body: taskBody(fmt.Sprintf("cycle %d, after", cycle))}
		first := do(t, workers[0].URL, fresh)
		require.Equal(t, http.StatusCreated, first.status)
		require.False(t, first.replayed())
		again := do(t, workers[1].URL, fresh)
		require.True(t, again.replayed())
		require.True(t, bytes.Equal(first.body, again.body))
		all = append(all, sent{c: fresh, first: first})
	}
	require.Equal(t, startPIDs, pids(t, workers), "the same processes served throughout")
	dups := duplicateTasks(t, pool)
	final := countRows(t, pool)
	require.Equal(t, len(all)+probes, final.Tasks)
	record(t, Result{
		Case:  "PostgreSQL crash (pg_ctl stop -m immediate, start)",
		Tried: fmt.Sprintf("%d tasks created through 2 worker processes per cycle, crash and restart of a private cluster, then every create retried with its key and body, and one key reused with another body", perCycle+2),
		Times: cycles,
		Seen: fmt.Sprintf("the same processes recovered after %d × 503 service_unavailable in all; the UNLOGGED idempotency_keys table was empty after every crash while tasks were intact; %d retries each ran once and answered the existing task byte for byte (201, Idempotent-Replayed); %d keys reused with another body got 422 idempotency_key_reused, and the original request's retry after that still got its task (ADR 0072)",
			unavailable, retries, cycles),
		Lost: lostSummary(map[string]int{"duplicate tasks": dups, "missing tasks": len(all) + probes - final.Tasks}),
	})
}

// tableDump returns both tables' rows as JSON, in a fixed order.
func tableDump(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	var tasks, keys string
	require.NoError(t, pool.QueryRow(context.Background(), `
		SELECT (SELECT coalesce(json_agg(t ORDER BY t.id), '[]')::text FROM tasks t),
		       (SELECT coalesce(json_agg(k ORDER BY k.user_id, k.key), '[]')::text FROM idempotency_keys k)`).Scan(&tasks, &keys))
	return tasks + "\n" + keys
}

// TestStoreOutage stops the database under running worker processes: every
// protected request gets 503 idempotency_store_unavailable with
// Retry-After and its handler does not run, reads get a 503 problem too,
// nothing is half-written, and once the server is back everything works
// without a restart.
func TestStoreOutage(t *testing.T) {
	t.Parallel()
	cycles := scale(1, 3)
	perWorker := scale(3, 10)
	ctx := context.Background()
	cl, pool := privateCluster(t)
	workers := startWorkers(t, 2, cl.URL(""))
	startPIDs := pids(t, workers)
	user := newUser()

	var refused, reads, retried, unavailableAfter int
	for cycle := range cycles {
		done := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: user, body: taskBody(fmt.Sprintf("cycle %d, done", cycle))}
		doneAnswer := do(t, workers[0].URL, done)
		require.Equal(t, http.StatusCreated, doneAnswer.status)
		target := doneAnswer.taskID(t)

		dump := tableDump(t, pool)
		runsBefore := sumRuns(t, workers)
		require.NoError(t, cl.Stop(ctx, "fast"))

		var creates, patches, deletes []call
		for _, w := range workers {
			for i := range perWorker {
				cr := call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: user, body: taskBody(fmt.Sprintf("cycle %d, outage %d", cycle, i))}
				pa := call{method: http.MethodPatch, path: "/tasks/" + target, keys: []string{newKey()}, sub: user, body: []byte(`{"status":"done"}`)}
				de := call{method: http.MethodDelete, path: "/tasks/" + target, keys: []string{newKey()}, sub: user}
				for _, c := range []call{cr, pa, de, done} {
					a := do(t, w.URL, c)
					require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s: %s", c.method, c.path, a.body)
					require.Equal(t, idempotency.CodeStoreUnavailable, a.problem(t).Code)
					require.NotEmpty(t, a.header.Get("Retry-After"))
					refused++
				}
				creates, patches, deletes = append(creates, cr), append(patches, pa), append(deletes, de)
				for _, path := range []string{"/tasks", "/tasks/" + target} {
					a := do(t, w.URL, call{method: http.MethodGet, path: path, sub: user})
					require.Equal(t, http.StatusServiceUnavailable, a.status, "GET %s: %s", path, a.body)
					require.Equal(t, problem.CodeUnavailable, a.problem(t).Code)
					require.NotEmpty(t, a.header.Get("Retry-After"))
					reads++
				}
			}
		}
		require.Equal(t, runsBefore, sumRuns(t, workers), "no handler ran during the outage")

		require.NoError(t, cl.Start(ctx))
		pool.Reset() // the test's own connections died with the server
		unavailableAfter += awaitService(t, workers, user)
		require.Equal(t, dump, tableDump(t, pool), "nothing was written during the outage")

		// Everything refused runs now, once.
		for i, c := range creates {
			a := do(t, workers[i%len(workers)].URL, c)
			require.Equal(t, http.StatusCreated, a.status, "%s", a.body)
			require.False(t, a.replayed())
			retried++
		}
		for i, c := range patches {
			a := do(t, workers[i%len(workers)].URL, c)
			require.Equal(t, http.StatusOK, a.status, "%s", a.body)
			retried++
		}
		a := do(t, workers[1].URL, deletes[0])
		require.Equal(t, http.StatusNoContent, a.status, "%s", a.body)
		retried++
		replay := do(t, workers[1].URL, done)
		require.Equal(t, http.StatusCreated, replay.status)
		require.True(t, replay.replayed())
		require.True(t, bytes.Equal(doneAnswer.body, replay.body))

		runs := sumRuns(t, workers)
		for _, c := range append(append(creates, patches...), deletes[0]) {
			k := c.method + " " + c.keys[0]
			require.Equal(t, 1, runs[k]-runsBefore[k], "%s ran once", k)
		}
	}
	require.Equal(t, startPIDs, pids(t, workers), "the same processes served throughout")
	dups := duplicateTasks(t, pool)
	record(t, Result{
		Case:  "store outage (PostgreSQL stopped)",
		Tried: fmt.Sprintf("server stopped (pg_ctl stop -m fast) under 2 worker processes; %d creates, updates, deletes and replays of a completed key, and %d reads per process; server started again; the refused requests retried", perWorker*4, perWorker*2),
		Times: cycles,
		Seen: fmt.Sprintf("%d protected requests, all 503 idempotency_store_unavailable with Retry-After and 0 handler runs; %d reads, all 503 service_unavailable problem+json with Retry-After; both tables identical before and after; the same processes served again without a restart (%d × 503 after the start) and %d retries each ran once",
			refused, reads, unavailableAfter, retried),
		Lost: lostSummary(map[string]int{"duplicate tasks": dups}),
	})
}
