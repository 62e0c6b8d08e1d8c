package reliability

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// tally counts the kinds of answers the same key got.
type tally struct {
	first, replays, inProgress int
}

// TestSameKeyAcrossProcesses sends the same key at once from N separate
// worker processes, each with its own pool, round after round: the
// protected handler runs exactly once per key, every other answer is a 409
// or the byte-exact replay of the first, and no task is duplicated.
func TestSameKeyAcrossProcesses(t *testing.T) {
	t.Parallel()
	n := scale(4, 8)
	rounds := scale(50, 200)

	db := apptest.New(t)
	workers := make([]*worker, n)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { workers[i] = startWorker(t, modeSpy, workerEnv(db.URL, nil)) })
	}
	wg.Wait()
	for _, w := range workers {
		require.NotNil(t, w, "a worker did not start")
	}

	user := newUser()
	seedKey := newKey()
	seed := do(t, workers[0].URL, call{method: http.MethodPost, path: "/tasks", keys: []string{seedKey}, body: taskBody("seed"), sub: user})
	require.Equal(t, http.StatusCreated, seed.status, "%s", seed.body)
	seedID := seed.taskID(t)
	tok := token(t, user)

	var total tally
	keys := make([]string, rounds)
	methods := make([]string, rounds)
	creates := 0
	for round := range rounds {
		key := newKey()
		keys[round] = key
		c := call{method: http.MethodPost, path: "/tasks", keys: []string{key}, body: taskBody(fmt.Sprintf("round %d", round))}
		if round%2 == 1 {
			c = call{method: http.MethodPatch, path: "/tasks/" + seedID, keys: []string{key},
				body: fmt.Appendf(nil, `{"description":"round %d"}`, round)}
		} else {
			creates++
		}
		methods[round] = c.method

		start := make(chan struct{})
		answers := make([]answer, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i, w := range workers {
			wg.Go(func() {
				<-start
				answers[i], errs[i] = send(context.Background(), w.URL, c, tok)
			})
		}
		close(start)
		wg.Wait()

		var got tally
		var firstBody []byte
		var firstLocation string
		success := http.StatusCreated
		if c.method == http.MethodPatch {
			success = http.StatusOK
		}
		for i, a := range answers {
			require.NoError(t, errs[i], "round %d, worker %d", round, i)
			switch {
			case a.status == success && !a.replayed():
				got.first++
				firstBody, firstLocation = a.body, a.header.Get("Location")
			case a.status == success && a.replayed():
				got.replays++
			case a.status == http.StatusConflict:
				require.Equal(t, idempotency.CodeKeyInUse, a.problem(t).Code)
				require.Equal(t, "1", a.header.Get("Retry-After"))
				got.inProgress++
			default:
				t.Fatalf("round %d, worker %d: unexpected answer %d %s", round, i, a.status, a.body)
			}
		}
		require.Equal(t, 1, got.first, "round %d: exactly one request runs the handler", round)
		for i, a := range answers {
			if a.status == success {
				require.True(t, bytes.Equal(firstBody, a.body), "round %d, worker %d: a replay differs from the first answer", round, i)
				require.Equal(t, firstLocation, a.header.Get("Location"))
			}
		}
		// Every request has been answered, so the first has completed: a
		// retry on any worker is the replay.
		again, err := send(context.Background(), workers[round%n].URL, c, tok)
		require.NoError(t, err)
		require.Equal(t, success, again.status, "%s", again.body)
		require.True(t, again.replayed())
		require.True(t, bytes.Equal(firstBody, again.body), "round %d: the retry is not byte-exact", round)

		total.first += got.first
		total.replays += got.replays
		total.inProgress += got.inProgress
	}

	runs := map[string]int{}
	for _, w := range workers {
		for k, v := range w.stats(t, false).Runs {
			runs[k] += v
		}
	}
	extraRuns := 0
	for round, key := range keys {
		n := runs[methods[round]+" "+key]
		require.Equal(t, 1, n, "round %d (%s %s): the handler ran %d times", round, methods[round], key, n)
		extraRuns += n - 1
	}
	rows := countRows(t, db.Pool)
	dups := duplicateTasks(t, db.Pool)
	require.Equal(t, 1+creates, rows.Tasks, "one task per create key, plus the seed")
	require.Equal(t, 1+rounds, rows.Keys, "one key record per round, plus the seed's")
	require.Zero(t, dups)
	var unfinished int
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM idempotency_keys WHERE status <> 'completed'`).Scan(&unfinished))
	require.Zero(t, unfinished)

	record(t, Result{
		Case:  "same key from several processes at once",
		Tried: fmt.Sprintf("%d worker processes (each its own pool of 2 connections) send one request each with the same key at the same instant; POST /tasks and PATCH /tasks/{id} in alternate rounds; then one more retry", n),
		Times: rounds,
		Seen: fmt.Sprintf("%d requests: %d first runs (1 per round), %d byte-exact replays, %d × 409 idempotency_key_in_use with Retry-After; %d retries, all byte-exact replays; %d tasks for %d create keys",
			rounds*n, total.first, total.replays, total.inProgress, rounds, rows.Tasks-1, creates),
		Lost: lostSummary(map[string]int{"duplicate tasks": dups, "extra handler runs": extraRuns, "unfinished keys": unfinished}),
	})
}

// lostSummary is "nothing" when every count is zero, else the non-zero ones.
func lostSummary(c map[string]int) string {
	var parts []string
	for k, v := range c {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", v, k))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return lines(parts...)
}
