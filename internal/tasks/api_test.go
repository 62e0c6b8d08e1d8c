package tasks_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/idempotency"
)

// TestRoutes is the table of request → response of every route.
func TestRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	seed := e.create(t, alice, `{"title":"seed","description":"first","status":"in_progress","due_date":"2030-12-31"}`)
	gone := e.create(t, alice, `{"title":"to delete"}`)
	bobs := e.create(t, bob, `{"title":"bob's"}`)
	long := strings.Repeat("é", 200) // 200 characters, 400 bytes

	cases := []struct {
		name           string
		user           string
		method, target string
		body           string
		status         int
		code           string   // problem code of an error
		fields         []string // fields a validation error names
		check          func(t *testing.T, resp events.APIGatewayV2HTTPResponse)
	}{
		// POST /tasks
		{name: "create minimal", user: alice, method: "POST", target: "/tasks", body: `{"title":"buy milk"}`, status: 201,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				task := decodeTask(t, resp)
				require.Equal(t, "/tasks/"+task.ID, resp.Headers["Location"])
				require.Equal(t, "buy milk", task.Title)
				require.Equal(t, tasks.StatusTodo, task.Status)
				require.Nil(t, task.Description)
				require.Nil(t, task.DueDate)
				require.Equal(t, task.CreatedAt, task.UpdatedAt)
				require.Empty(t, resp.Headers["Idempotent-Replayed"])
				var raw map[string]any
				require.NoError(t, json.Unmarshal([]byte(resp.Body), &raw))
				require.Contains(t, raw, "description", "unset fields are null, not absent")
				require.Nil(t, raw["description"])
				require.Nil(t, raw["due_date"])
				isRFC3339(t, raw["created_at"].(string))
				isRFC3339(t, raw["updated_at"].(string))
			}},
		{name: "create full", user: alice, method: "POST", target: "/tasks", status: 201,
			body: `{"title":"report","description":"Q3 <numbers> & more","status":"done","due_date":"2024-02-29"}`,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				task := decodeTask(t, resp)
				require.Equal(t, "Q3 <numbers> & more", *task.Description)
				require.Contains(t, resp.Body, `"Q3 <numbers> & more"`, "no HTML escaping")
				require.Equal(t, tasks.StatusDone, task.Status)
				require.Equal(t, "2024-02-29", task.DueDate.String())
			}},
		{name: "create title of 200 characters", user: alice, method: "POST", target: "/tasks", body: `{"title":"` + long + `"}`, status: 201},
		{name: "create with null description and due_date", user: alice, method: "POST", target: "/tasks", body: `{"title":"x","description":null,"due_date":null}`, status: 201},
		{name: "create base64 body", user: alice, method: "POST", target: "/tasks", status: 201,
			body: "base64:" + base64.StdEncoding.EncodeToString([]byte(`{"title":"encoded"}`)),
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.Equal(t, "encoded", decodeTask(t, resp).Title)
			}},
		{name: "create invalid JSON", user: alice, method: "POST", target: "/tasks", body: `{"title":`, status: 400, code: problem.CodeValidation, fields: []string{"body"}},
		{name: "create empty body", user: alice, method: "POST", target: "/tasks", body: ``, status: 400, code: problem.CodeValidation, fields: []string{"body"}},
		{name: "create array", user: alice, method: "POST", target: "/tasks", body: `[{"title":"a"}]`, status: 400, code: problem.CodeValidation, fields: []string{"body"}},
		{name: "create trailing data", user: alice, method: "POST", target: "/tasks", body: `{"title":"a"} {}`, status: 400, code: problem.CodeValidation, fields: []string{"body"}},
		{name: "create unknown field", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","priority":1}`, status: 400, code: problem.CodeValidation, fields: []string{"priority"}},
		{name: "create id is not writable", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","id":"` + seed.ID + `"}`, status: 400, code: problem.CodeValidation, fields: []string{"id"}},
		{name: "create missing title", user: alice, method: "POST", target: "/tasks", body: `{"description":"d"}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create null title", user: alice, method: "POST", target: "/tasks", body: `{"title":null}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create title wrong type", user: alice, method: "POST", target: "/tasks", body: `{"title":5}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create empty title", user: alice, method: "POST", target: "/tasks", body: `{"title":""}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create blank title", user: alice, method: "POST", target: "/tasks", body: `{"title":"  \t"}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create title of 201 characters", user: alice, method: "POST", target: "/tasks", body: `{"title":"` + long + `x"}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create title with NUL", user: alice, method: "POST", target: "/tasks", body: `{"title":"a\u0000b"}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create description too long", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","description":"` + strings.Repeat("d", 2001) + `"}`, status: 400, code: problem.CodeValidation, fields: []string{"description"}},
		{name: "create description wrong type", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","description":["d"]}`, status: 400, code: problem.CodeValidation, fields: []string{"description"}},
		{name: "create unknown status", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","status":"blocked"}`, status: 400, code: problem.CodeValidation, fields: []string{"status"}},
		{name: "create null status", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","status":null}`, status: 400, code: problem.CodeValidation, fields: []string{"status"}},
		{name: "create impossible date", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","due_date":"2025-02-29"}`, status: 400, code: problem.CodeValidation, fields: []string{"due_date"}},
		{name: "create short date", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","due_date":"2025-1-2"}`, status: 400, code: problem.CodeValidation, fields: []string{"due_date"}},
		{name: "create timestamp as date", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","due_date":"2025-01-02T00:00:00Z"}`, status: 400, code: problem.CodeValidation, fields: []string{"due_date"}},
		{name: "create date wrong type", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","due_date":20250102}`, status: 400, code: problem.CodeValidation, fields: []string{"due_date"}},
		{name: "create repeated field", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","title":"b"}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "create every field wrong", user: alice, method: "POST", target: "/tasks", body: `{"title":1,"description":2,"status":"x","due_date":"y","extra":true}`, status: 400, code: problem.CodeValidation, fields: []string{"title", "description", "status", "due_date", "extra"}},
		{name: "create too large", user: alice, method: "POST", target: "/tasks", body: `{"title":"a","description":"` + strings.Repeat("d", 70<<10) + `"}`, status: 413, code: idempotency.CodePayloadTooLarge},
		{name: "create without user", method: "POST", target: "/tasks", body: `{"title":"a"}`, status: 401, code: idempotency.CodeUnauthenticated},
		{name: "create with a subject that is not a UUID", user: "auth0|6543210fedcba", method: "POST", target: "/tasks", body: `{"title":"a"}`, status: 201},

		// GET /tasks/{id}
		{name: "get own", user: alice, method: "GET", target: "/tasks/" + seed.ID, status: 200,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.Equal(t, seed, decodeTask(t, resp))
			}},
		{name: "get upper-case id", user: alice, method: "GET", target: "/tasks/" + strings.ToUpper(seed.ID), status: 200,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.Equal(t, seed.ID, decodeTask(t, resp).ID)
			}},
		{name: "get another user's", user: alice, method: "GET", target: "/tasks/" + bobs.ID, status: 404, code: problem.CodeNotFound},
		{name: "get unknown", user: alice, method: "GET", target: "/tasks/5f0c8a4e-1111-4222-8333-944455556666", status: 404, code: problem.CodeNotFound},
		{name: "get id not a UUID", user: alice, method: "GET", target: "/tasks/not-a-uuid", status: 404, code: problem.CodeNotFound},
		{name: "get id in braces", user: alice, method: "GET", target: "/tasks/{" + seed.ID + "}", status: 404, code: problem.CodeNotFound},
		{name: "get without user", method: "GET", target: "/tasks/" + seed.ID, status: 401, code: idempotency.CodeUnauthenticated},

		// GET /tasks
		{name: "list", user: bob, method: "GET", target: "/tasks", status: 200,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.JSONEq(t, `{"tasks":[`+mustJSON(t, bobs)+`],"next":null}`, resp.Body)
			}},
		{name: "list empty", user: "3a9e1c55-0000-4000-8000-000000000003", method: "GET", target: "/tasks", status: 200,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.JSONEq(t, `{"tasks":[],"next":null}`, resp.Body)
			}},
		{name: "list limit 0", user: alice, method: "GET", target: "/tasks?limit=0", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit 101", user: alice, method: "GET", target: "/tasks?limit=101", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit negative", user: alice, method: "GET", target: "/tasks?limit=-1", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit not a number", user: alice, method: "GET", target: "/tasks?limit=ten", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit fraction", user: alice, method: "GET", target: "/tasks?limit=1.5", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit empty", user: alice, method: "GET", target: "/tasks?limit=", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list limit repeated", user: alice, method: "GET", target: "/tasks?limit=1&limit=2", status: 400, code: problem.CodeValidation, fields: []string{"limit"}},
		{name: "list garbage cursor", user: alice, method: "GET", target: "/tasks?cursor=abc", status: 400, code: problem.CodeValidation, fields: []string{"cursor"}},
		{name: "list bad limit and cursor", user: alice, method: "GET", target: "/tasks?limit=x&cursor=abc", status: 400, code: problem.CodeValidation, fields: []string{"limit", "cursor"}},
		{name: "list without user", method: "GET", target: "/tasks", status: 401, code: idempotency.CodeUnauthenticated},

		// PATCH /tasks/{id}
		{name: "patch unknown field", user: alice, method: "PATCH", target: "/tasks/" + seed.ID, body: `{"done":true}`, status: 400, code: problem.CodeValidation, fields: []string{"done"}},
		{name: "patch null title", user: alice, method: "PATCH", target: "/tasks/" + seed.ID, body: `{"title":null}`, status: 400, code: problem.CodeValidation, fields: []string{"title"}},
		{name: "patch null status", user: alice, method: "PATCH", target: "/tasks/" + seed.ID, body: `{"status":null}`, status: 400, code: problem.CodeValidation, fields: []string{"status"}},
		{name: "patch bad status", user: alice, method: "PATCH", target: "/tasks/" + seed.ID, body: `{"status":"DONE"}`, status: 400, code: problem.CodeValidation, fields: []string{"status"}},
		{name: "patch invalid JSON", user: alice, method: "PATCH", target: "/tasks/" + seed.ID, body: `title=x`, status: 400, code: problem.CodeValidation, fields: []string{"body"}},
		{name: "patch another user's", user: alice, method: "PATCH", target: "/tasks/" + bobs.ID, body: `{"title":"mine now"}`, status: 404, code: problem.CodeNotFound},
		{name: "patch id not a UUID", user: alice, method: "PATCH", target: "/tasks/42", body: `{"title":"x"}`, status: 404, code: problem.CodeNotFound},
		{name: "patch unknown id with a bad body", user: alice, method: "PATCH", target: "/tasks/42", body: `{`, status: 404, code: problem.CodeNotFound},

		// DELETE /tasks/{id}
		{name: "delete another user's", user: alice, method: "DELETE", target: "/tasks/" + bobs.ID, status: 404, code: problem.CodeNotFound},
		{name: "delete id not a UUID", user: alice, method: "DELETE", target: "/tasks/zzz", status: 404, code: problem.CodeNotFound},
		{name: "delete unknown", user: alice, method: "DELETE", target: "/tasks/5f0c8a4e-1111-4222-8333-944455556666", status: 404, code: problem.CodeNotFound},
		{name: "delete own", user: alice, method: "DELETE", target: "/tasks/" + gone.ID, status: 204,
			check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse) {
				require.Empty(t, resp.Body)
				require.Empty(t, resp.Headers["Content-Type"])
			}},
		{name: "delete own again", user: alice, method: "DELETE", target: "/tasks/" + gone.ID, status: 404, code: problem.CodeNotFound},
		{name: "get deleted", user: alice, method: "GET", target: "/tasks/" + gone.ID, status: 404, code: problem.CodeNotFound},
	}
	for _, c := range cases { // in order: the last cases depend on earlier ones
		t.Run(c.name, func(t *testing.T) {
			req := request(c.user, c.method, c.target, c.body)
			if b, ok := strings.CutPrefix(c.body, "base64:"); ok {
				req.Body, req.IsBase64Encoded = b, true
			}
			resp, err := e.handler(c.method, c.target)(context.Background(), req)
			require.NoError(t, err)
			if c.code != "" {
				requireProblem(t, resp, c.status, c.code, c.fields...)
			} else {
				require.Equal(t, c.status, resp.StatusCode, resp.Body)
			}
			if c.check != nil {
				c.check(t, resp)
			}
		})
	}

	// Nothing another user tried changed bob's task.
	resp := e.do(t, bob, "GET", "/tasks/"+bobs.ID, "")
	require.Equal(t, bobs, decodeTask(t, resp))
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

func TestUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	orig := e.create(t, alice, `{"title":"draft","description":"notes","due_date":"2031-01-15"}`)
	target := "/tasks/" + orig.ID

	t.Run("one field changes, the others stay", func(t *testing.T) {
		resp := e.do(t, alice, "PATCH", target, `{"status":"in_progress"}`)
		require.Equal(t, 200, resp.StatusCode, resp.Body)
		got := decodeTask(t, resp)
		require.Equal(t, tasks.StatusInProgress, got.Status)
		require.Equal(t, orig.Title, got.Title)
		require.Equal(t, orig.Description, got.Description)
		require.Equal(t, orig.DueDate, got.DueDate)
		require.Equal(t, orig.CreatedAt, got.CreatedAt)
		require.True(t, got.UpdatedAt.After(orig.UpdatedAt), "updated_at bumps: %v → %v", orig.UpdatedAt, got.UpdatedAt)
	})
	t.Run("null clears description and due_date", func(t *testing.T) {
		resp := e.do(t, alice, "PATCH", target, `{"description":null,"due_date":null,"title":"final"}`)
		require.Equal(t, 200, resp.StatusCode, resp.Body)
		got := decodeTask(t, resp)
		require.Nil(t, got.Description)
		require.Nil(t, got.DueDate)
		require.Equal(t, "final", got.Title)
		require.Equal(t, got, decodeTask(t, e.do(t, alice, "GET", target, "")), "the change is stored")
	})
	t.Run("values set again", func(t *testing.T) {
		resp := e.do(t, alice, "PATCH", target, `{"description":"","due_date":"2032-06-30"}`)
		require.Equal(t, 200, resp.StatusCode, resp.Body)
		got := decodeTask(t, resp)
		require.Equal(t, ptr(""), got.Description)
		require.Equal(t, "2032-06-30", got.DueDate.String())
	})
	t.Run("empty patch changes nothing", func(t *testing.T) {
		before := decodeTask(t, e.do(t, alice, "GET", target, ""))
		resp := e.do(t, alice, "PATCH", target, `{}`)
		require.Equal(t, 200, resp.StatusCode, resp.Body)
		require.Equal(t, before, decodeTask(t, resp))
	})
	t.Run("a rejected patch changes nothing", func(t *testing.T) {
		before := decodeTask(t, e.do(t, alice, "GET", target, ""))
		requireProblem(t, e.do(t, alice, "PATCH", target, `{"title":"ok","status":"nope"}`), 400, problem.CodeValidation, "status")
		require.Equal(t, before, decodeTask(t, e.do(t, alice, "GET", target, "")))
	})
}

// TestUserIsolation: another user can neither see, change nor delete a
// task, and learns nothing of it: the answers are those of an unknown id.
func TestUserIsolation(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	mine := e.create(t, alice, `{"title":"private","description":"secret"}`)
	target := "/tasks/" + mine.ID
	unknown := "/tasks/9b2d7e1f-3c4a-4b5d-8e6f-7a8b9c0d1e2f"

	for _, m := range []struct{ method, body string }{{"GET", ""}, {"PATCH", `{"title":"hijacked","description":null}`}, {"DELETE", ""}} {
		theirs := e.do(t, bob, m.method, target, m.body)
		none := e.do(t, bob, m.method, unknown, m.body)
		requireProblem(t, theirs, 404, problem.CodeNotFound)
		require.Equal(t, none, theirs, "%s of another user's task looks exactly like an unknown id", m.method)
		require.NotContains(t, theirs.Body, mine.ID)
	}
	list := e.do(t, bob, "GET", "/tasks", "")
	require.JSONEq(t, `{"tasks":[],"next":null}`, list.Body)

	require.Equal(t, mine, decodeTask(t, e.do(t, alice, "GET", target, "")), "alice's task is untouched")
	require.Equal(t, 1, e.taskCount(t))
}

// TestDatabaseFailure: a database that cannot be reached is a 503 with
// Retry-After and nothing internal in the body; the handler returns no Go
// error.
func TestDatabaseFailure(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	task := e.create(t, alice, `{"title":"x"}`)
	closed := tasks.NewAPI(tasks.NewService(closedPool(t, e.db.URL)), &tasks.Options{Logger: e.quietLogger()})
	for _, c := range []struct {
		h            tasks.Handler
		method, path string
		body         string
	}{
		{closed.Create, "POST", "/tasks", `{"title":"x"}`},
		{closed.List, "GET", "/tasks", ""},
		{closed.Get, "GET", "/tasks/" + task.ID, ""},
		{closed.Update, "PATCH", "/tasks/" + task.ID, `{"title":"y"}`},
		{closed.Delete, "DELETE", "/tasks/" + task.ID, ""},
	} {
		resp, err := c.h(context.Background(), request(alice, c.method, c.path, c.body))
		require.NoError(t, err)
		d := requireProblem(t, resp, 503, problem.CodeUnavailable)
		require.Equal(t, "2", resp.Headers["Retry-After"])
		require.NotContains(t, strings.ToLower(d.Detail), "pool")
		require.NotContains(t, strings.ToLower(resp.Body), "closed")
	}
}

// TestPanicIsAnswered: a bug that panics is answered with a 500 problem, not
// a Go error (which API Gateway would turn into a bare 502).
func TestPanicIsAnswered(t *testing.T) {
	t.Parallel()
	broken := tasks.NewAPI(tasks.NewService(nil), &tasks.Options{Logger: (&env{}).quietLogger()})
	resp, err := broken.Get(context.Background(), request(alice, "GET", "/tasks/9b2d7e1f-3c4a-4b5d-8e6f-7a8b9c0d1e2f", ""))
	require.NoError(t, err)
	d := requireProblem(t, resp, 500, problem.CodeInternal)
	require.NotContains(t, d.Detail, "nil pointer")
}
