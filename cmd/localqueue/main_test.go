package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
)

// TestFeed feeds task events through the local queue to the real handler
// on a database of its own: each event is recorded once (a duplicate line
// is skipped as done), and a body that is no task event is redelivered
// until its receives run out, then lands in the dead-letter file.
func TestFeed(t *testing.T) {
	t.Parallel()
	for _, fifo := range []bool{false, true} {
		t.Run(map[bool]string{false: "standard", true: "fifo"}[fifo], func(t *testing.T) {
			t.Parallel()
			db := apptest.New(t)
			user, taskA, taskB := uuid.NewString(), uuid.NewString(), uuid.NewString()
			line := func(id, task, kind string) string {
				return `{"event_id":"` + id + `","user_id":"` + user + `","task_id":"` + task + `","kind":"` + kind + `","occurred_at":"2026-12-01T09:00:00Z"}`
			}
			input := strings.Join([]string{
				line("a-1", taskA, "created"),
				line("b-1", taskB, "created"),
				`{"event_id":"bad","task_id":"` + taskA + `","kind":"archived"}`,
				line("a-1", taskA, "created"), // a producer's resend
				line("b-2", taskB, "updated"),
			}, "\n")
			deadLetter := filepath.Join(t.TempDir(), "dead.jsonl")
			args := []string{"-batch", "2", "-max-receives", "3", "-dead-letter", deadLetter, "-database-url", db.URL}
			if fifo {
				args = append(args, "-fifo")
			}
			env := map[string]string{"LOG_LEVEL": "error"}
			var out bytes.Buffer
			require.NoError(t, run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(input), &out))
			require.Contains(t, out.String(), "done: 5 messages", out.String())

			var n int
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM task_activity WHERE user_id = $1`, user).Scan(&n))
			require.Equal(t, 3, n, "a-1, b-1 and b-2, each once")
			rows, err := db.Pool.Query(context.Background(), `SELECT event_id, count(*) FROM task_activity WHERE user_id = $1 GROUP BY event_id`, user)
			require.NoError(t, err)
			for rows.Next() {
				var id string
				var c int
				require.NoError(t, rows.Scan(&id, &c))
				require.Equal(t, 1, c, "event %s recorded once", id)
			}
			require.NoError(t, rows.Err())
			dead, err := os.ReadFile(deadLetter)
			require.NoError(t, err)
			require.Contains(t, string(dead), `"event_id":"bad"`)
		})
	}
}
