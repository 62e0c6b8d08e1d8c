package tasks_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
)

type page struct {
	Tasks []tasks.Task `json:"tasks"`
	Next  *string      `json:"next"`
}

func (e *env) list(t *testing.T, user, target string) page {
	t.Helper()
	resp := e.do(t, user, "GET", target, "")
	require.Equal(t, 200, resp.StatusCode, resp.Body)
	require.Equal(t, "application/json", resp.Headers["Content-Type"])
	var p page
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &p))
	require.NotNil(t, p.Tasks)
	return p
}

// walk follows the cursors from the first page to the last and returns
// every task seen, in order.
func (e *env) walk(t *testing.T, user string, limit int) (all []tasks.Task, pages int) {
	t.Helper()
	target := fmt.Sprintf("/tasks?limit=%d", limit)
	for {
		p := e.list(t, user, target)
		pages++
		require.LessOrEqual(t, len(p.Tasks), limit)
		all = append(all, p.Tasks...)
		if p.Next == nil {
			return all, pages
		}
		require.Len(t, p.Tasks, limit, "only the last page is short")
		target = fmt.Sprintf("/tasks?limit=%d&cursor=%s", limit, *p.Next)
		require.Less(t, pages, 100, "pagination does not end")
	}
}

func ids(ts []tasks.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

func TestListNewestFirst(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	var created []string
	for i := range 4 {
		created = append(created, e.create(t, alice, fmt.Sprintf(`{"title":"task %d"}`, i)).ID)
	}
	slices.Reverse(created)
	require.Equal(t, created, ids(e.list(t, alice, "/tasks").Tasks))

	all, pages := e.walk(t, alice, 1)
	require.Equal(t, created, ids(all))
	require.Equal(t, 4, pages)
}

// TestListPagination pages through tasks of which many share a created_at:
// every task appears exactly once, in (created_at, id) descending order.
func TestListPagination(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ctx := context.Background()
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	// 23 tasks on 4 distinct instants: ties inside every page and across
	// page boundaries. Another user's tasks are interleaved.
	_, err := e.db.Pool.Exec(ctx, `
		INSERT INTO tasks (user_id, title, created_at, updated_at)
		SELECT u::uuid, 'task ' || i, $1::timestamptz + (i % 4) * interval '1 microsecond', $1::timestamptz
		FROM generate_series(1, 23) i, unnest(ARRAY[$2, $3]) u`, base, alice, bob)
	require.NoError(t, err)

	var want []string
	rows, err := e.db.Pool.Query(ctx, `SELECT id::text FROM tasks WHERE user_id = $1 ORDER BY created_at DESC, id DESC`, alice)
	require.NoError(t, err)
	for rows.Next() {
		var id string
		require.NoError(t, rows.Scan(&id))
		want = append(want, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, want, 23)

	for _, limit := range []int{1, 5, 6, 23, 100} {
		all, pages := e.walk(t, alice, limit)
		require.Equal(t, want, ids(all), "limit %d", limit)
		require.Equal(t, (23+limit-1)/limit, pages, "limit %d", limit)
	}
}

func TestListDefaultAndMaximumLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, err := e.db.Pool.Exec(context.Background(), `
		INSERT INTO tasks (user_id, title, created_at)
		SELECT $1::uuid, 'task ' || i, now() - i * interval '1 second' FROM generate_series(1, 101) i`, alice)
	require.NoError(t, err)

	p := e.list(t, alice, "/tasks")
	require.Len(t, p.Tasks, tasks.DefaultLimit)
	require.NotNil(t, p.Next)
	require.Equal(t, "task 1", p.Tasks[0].Title)

	p = e.list(t, alice, "/tasks?limit=100")
	require.Len(t, p.Tasks, 100)
	require.NotNil(t, p.Next)
	rest := e.list(t, alice, "/tasks?limit=100&cursor="+*p.Next)
	require.Len(t, rest.Tasks, 1)
	require.Equal(t, "task 101", rest.Tasks[0].Title)
	require.Nil(t, rest.Next)

	empty := e.list(t, alice, "/tasks?limit=100&cursor=")
	require.Len(t, empty.Tasks, 100, "an empty cursor is the first page")
}

// TestListCursorTampering: a cursor that was edited, truncated, extended or
// minted for another user is a 400 naming the cursor, never a page.
func TestListCursorTampering(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for i := range 3 {
		e.create(t, alice, fmt.Sprintf(`{"title":"a%d"}`, i))
		e.create(t, bob, fmt.Sprintf(`{"title":"b%d"}`, i))
	}
	next := e.list(t, alice, "/tasks?limit=1").Next
	require.NotNil(t, next)
	c := *next
	require.Len(t, e.list(t, alice, "/tasks?limit=1&cursor="+c).Tasks, 1, "the genuine cursor works")

	flip := func(i int) string {
		b := []byte(c)
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
		return string(b)
	}
	tampered := map[string]string{
		"truncated":    c[:len(c)-1],
		"extended":     c + "A",
		"padded":       c + "=",
		"std base64":   strings.NewReplacer("-", "+", "_", "/").Replace(c) + "+",
		"not base64":   "!!!!",
		"last changed": flip(len(c) - 1),
	}
	for i := range len(c) - 1 {
		tampered[fmt.Sprintf("byte %d changed", i)] = flip(i)
	}
	for name, bad := range tampered {
		t.Run(name, func(t *testing.T) {
			requireProblem(t, e.do(t, alice, "GET", "/tasks?cursor="+url.QueryEscape(bad), ""), 400, problem.CodeValidation, "cursor")
		})
	}
	requireProblem(t, e.do(t, bob, "GET", "/tasks?cursor="+c, ""), 400, problem.CodeValidation, "cursor")
}

func TestCursorRoundTrip(t *testing.T) {
	t.Parallel()
	p := tasks.Position{CreatedAt: time.Date(2025, 1, 2, 3, 4, 5, 123456000, time.UTC), ID: "5f0c8a4e-1111-4222-8333-944455556666"}
	c := tasks.EncodeCursor(alice, p)
	got, err := tasks.DecodeCursor(alice, c)
	require.NoError(t, err)
	require.Equal(t, p, got)
	_, err = tasks.DecodeCursor(bob, c)
	var verr *tasks.ValidationError
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "cursor", verr.Fields[0].Field)
}
