package reliability

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// Bodies of the gateway's own answers (API Gateway's shape, not problem+json).
const (
	gatewayUnauthorized = `{"message":"Unauthorized"}`
	gatewayNotFound     = `{"message":"Not Found"}`
	gatewayTooLarge     = `{"message":"Request Entity Too Large"}`
)

// badCase is one request and what it must get.
type badCase struct {
	name string
	c    call
	// status is the expected status; code the expected problem code, or
	// gateway the expected body of one of the gateway's own answers.
	status  int
	code    string
	gateway string
	// tasks and keys are the expected changes in the row counts: a refusal
	// before the claim changes nothing; a 4xx from the handler is stored
	// as the key's completed answer (spec §5.3) and changes no task.
	tasks, keys int
	// check runs further assertions.
	check func(t *testing.T, a answer)
}

// rawToken returns an unsigned JWT with exactly these claims.
func rawToken(claims map[string]any) string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	p, _ := json.Marshal(claims)
	return h + "." + base64.RawURLEncoding.EncodeToString(p) + ".c2ln"
}

// TestBadInput sends bad input of every kind through the local API Gateway
// (real HTTP, a worker process serving the task functions as taskfn builds
// them): each gets its documented 4xx, never a 5xx, and the database
// changes only as documented.
func TestBadInput(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	w := startWorker(t, modeTaskfn, workerEnv(db.URL, nil))
	alice, bob := newUser(), newUser()

	aliceKey := newKey()
	aliceBody := taskBody("alice's task")
	created := do(t, w.URL, call{method: http.MethodPost, path: "/tasks", keys: []string{aliceKey}, body: aliceBody, sub: alice})
	require.Equal(t, http.StatusCreated, created.status, "%s", created.body)
	aliceTask := created.taskID(t)
	for i := range 2 {
		a := do(t, w.URL, call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, body: taskBody(fmt.Sprintf("bob's %d", i)), sub: bob})
		require.Equal(t, http.StatusCreated, a.status)
	}
	page := do(t, w.URL, call{method: http.MethodGet, path: "/tasks?limit=1", sub: bob})
	require.Equal(t, http.StatusOK, page.status)
	var bobPage struct {
		Next *string `json:"next"`
	}
	require.NoError(t, json.Unmarshal(page.body, &bobPage))
	require.NotNil(t, bobPage.Next)

	v4 := newKey()
	post := func(keys []string, body string) call {
		return call{method: http.MethodPost, path: "/tasks", keys: keys, body: []byte(body), sub: alice}
	}
	postKey := func(key string) call { return post([]string{key}, `{"title":"keyed"}`) }
	postBody := func(body string) call { return post([]string{newKey()}, body) }
	patchBody := func(body string) call {
		return call{method: http.MethodPatch, path: "/tasks/" + aliceTask, keys: []string{newKey()}, body: []byte(body), sub: alice}
	}
	deep := func(inner string) string {
		return strings.Repeat("[", 20_000) + inner + strings.Repeat("]", 20_000)
	}
	invalidKey := func(name, key string) badCase {
		return badCase{name: "key " + name, c: postKey(key), status: 400, code: idempotency.CodeKeyInvalid}
	}
	validation := func(name string, c call) badCase {
		return badCase{name: name, c: c, status: 400, code: problem.CodeValidation, keys: 1}
	}
	notFound := func(name string, c call, keys int) badCase {
		return badCase{name: name, c: c, status: 404, code: problem.CodeNotFound, keys: keys}
	}
	gatewaySays := func(name string, c call, status int, body string) badCase {
		return badCase{name: name, c: c, status: status, gateway: body}
	}
	withAuth := func(c call, auth string) call { c.sub, c.auth = "", auth; return c }
	asUser := func(c call, sub string) call { c.sub = sub; return c }

	cases := []badCase{
		// The key (spec §2): refused before anything is looked up.
		{name: "key missing", c: post(nil, `{"title":"x"}`), status: 400, code: idempotency.CodeKeyMissing},
		invalidKey("empty", ""),
		invalidKey("blank", "   "),
		invalidKey("UUID v1", "c232ab00-9414-11ec-b3c8-9e6bdeced846"),
		invalidKey("UUID v7", "01890a5d-ac96-774b-bcce-b302099a8057"),
		invalidKey("UUID v4 with a wrong variant", v4[:19]+"c"+v4[20:]),
		invalidKey("nil UUID", "00000000-0000-0000-0000-000000000000"),
		invalidKey("too long (37 characters)", v4+"a"),
		invalidKey("8 KiB long", strings.Repeat("a", 8<<10)),
		invalidKey("without dashes", strings.ReplaceAll(v4, "-", "")),
		invalidKey("in braces", "{"+v4+"}"),
		invalidKey("as a URN", "urn:uuid:"+v4),
		invalidKey("non-ASCII", v4[:35]+"é"),
		invalidKey("quoted, unterminated", `"`+v4),
		invalidKey("quoted twice", `""`+v4+`""`),
		invalidKey("single-quoted", `'`+v4+`'`),
		{name: "key two different values (two header lines)", c: post([]string{newKey(), newKey()}, `{"title":"x"}`), status: 400, code: idempotency.CodeKeyInvalid},
		{name: "key two different values (one comma-joined line)", c: post([]string{newKey() + "," + newKey()}, `{"title":"x"}`), status: 400, code: idempotency.CodeKeyInvalid},
		{name: "key two values, quoted and bare, different", c: post([]string{`"` + newKey() + `"`, newKey()}, `{"title":"x"}`), status: 400, code: idempotency.CodeKeyInvalid},
		{name: "key missing on PATCH", c: call{method: http.MethodPatch, path: "/tasks/" + aliceTask, body: []byte(`{"status":"done"}`), sub: alice}, status: 400, code: idempotency.CodeKeyMissing},
		{name: "key invalid on DELETE", c: call{method: http.MethodDelete, path: "/tasks/" + aliceTask, keys: []string{"not-a-key"}, sub: alice}, status: 400, code: idempotency.CodeKeyInvalid},

		// The same key for another request (spec §4): 422, nothing changes.
		{name: "key reused with another body", c: post([]string{aliceKey}, `{"title":"another"}`), status: 422, code: idempotency.CodeKeyReused},
		{name: "key reused on another path", c: call{method: http.MethodPatch, path: "/tasks/" + aliceTask, keys: []string{aliceKey}, body: aliceBody, sub: alice}, status: 422, code: idempotency.CodeKeyReused},
		{name: "key reused with a query string", c: call{method: http.MethodPost, path: "/tasks?x=1", keys: []string{aliceKey}, body: aliceBody, sub: alice}, status: 422, code: idempotency.CodeKeyReused},
		{name: "key reused, quoted form", c: post([]string{`"` + aliceKey + `"`}, `{"title":"another"}`), status: 422, code: idempotency.CodeKeyReused},

		// Bodies: the handler's 400 names the field; its answer is stored.
		validation("body invalid JSON", postBody(`{"title":`)),
		validation("body not JSON", postBody(`title=x`)),
		validation("body empty", call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: alice}),
		validation("body JSON array", postBody(`[{"title":"x"}]`)),
		validation("body JSON null", postBody(`null`)),
		validation("body JSON string", postBody(`"x"`)),
		validation("body trailing data", postBody(`{"title":"x"}{"title":"y"}`)),
		validation("body duplicate member", postBody(`{"title":"x","title":"y"}`)),
		validation("body invalid UTF-8 (binary content type)", call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, sub: alice,
			body: []byte("{\"title\":\"\xff\xfe\"}"), contentType: "application/octet-stream"}),
		{name: "body invalid UTF-8 (JSON content type): the event's JSON turns it into U+FFFD", c: postBody("{\"title\":\"\xff\xfe\"}"),
			status: 201, tasks: 1, keys: 1, check: func(t *testing.T, a answer) {
				require.Contains(t, string(a.body), "\"title\":\"\uFFFD\uFFFD\"")
			}},
		validation("title missing", postBody(`{}`)),
		validation("title a number", postBody(`{"title":5}`)),
		validation("title null", postBody(`{"title":null}`)),
		validation("title empty", postBody(`{"title":""}`)),
		validation("title 201 characters", postBody(`{"title":"`+strings.Repeat("a", 201)+`"}`)),
		validation("title with a NUL character", postBody(`{"title":"a\u0000b"}`)),
		validation("description a number", postBody(`{"title":"x","description":1}`)),
		validation("description 2001 characters", postBody(`{"title":"x","description":"`+strings.Repeat("d", 2001)+`"}`)),
		validation("status unknown", postBody(`{"title":"x","status":"blocked"}`)),
		validation("due_date not a date", postBody(`{"title":"x","due_date":"2024-13-01"}`)),
		validation("due_date a number", postBody(`{"title":"x","due_date":20240101}`)),
		validation("unknown field", postBody(`{"title":"x","priority":1}`)),
		validation("user_id in the body", postBody(`{"title":"x","user_id":"`+bob+`"}`)),
		validation("deep nesting in an unknown field", postBody(`{"title":"x","n":`+deep("")+`}`)),
		validation("deep nesting as the title", postBody(`{"title":`+deep(`"x"`)+`}`)),
		validation("deep nesting as the body", postBody(deep(""))),
		{name: "deep nesting over 64 KiB", c: postBody(`{"title":"x","n":` + strings.Repeat("[", 40_000) + strings.Repeat("]", 40_000) + `}`), status: 413, code: idempotency.CodePayloadTooLarge, keys: 1},
		validation("PATCH invalid JSON", patchBody(`{`)),
		validation("PATCH unknown field", patchBody(`{"owner":"bob"}`)),
		validation("PATCH title null", patchBody(`{"title":null}`)),
		validation("PATCH status a number", patchBody(`{"status":1}`)),
		{name: "body over the function's 64 KiB", c: postBody(`{"title":"` + strings.Repeat("a", 65<<10) + `"}`), status: 413, code: idempotency.CodePayloadTooLarge, keys: 1},
		// The decorator refuses a body over its MaxBodyBytes (6 MiB by
		// default) before the claim, so nothing is stored.
		{name: "body over Lambda's 6 MB (7 MB)", c: postBody(`{"title":"` + strings.Repeat("a", 7<<20) + `"}`), status: 413, code: idempotency.CodePayloadTooLarge, keys: 0},
		gatewaySays("body over API Gateway's 10 MB (11 MB)", postBody(`{"title":"`+strings.Repeat("a", 11<<20)+`"}`), 413, gatewayTooLarge),

		// Identity (spec §3).
		gatewaySays("no token", withAuth(postKey(newKey()), ""), 401, gatewayUnauthorized),
		gatewaySays("token not a JWT", withAuth(postKey(newKey()), "Bearer nonsense"), 401, gatewayUnauthorized),
		gatewaySays("token expired", withAuth(postKey(newKey()), "Bearer "+rawToken(map[string]any{"sub": alice, "exp": time.Now().Add(-time.Hour).Unix()})), 401, gatewayUnauthorized),
		gatewaySays("no token on a read", call{method: http.MethodGet, path: "/tasks"}, 401, gatewayUnauthorized),
		{name: "sub not a UUID: a user of its own (SubjectUUID)", c: asUser(postKey(newKey()), "auth0|alice"), status: 201, tasks: 1, keys: 1,
			check: func(t *testing.T, a answer) { require.False(t, a.replayed()) }},
		{name: "sub not a UUID on a read: its own tasks only", c: call{method: http.MethodGet, path: "/tasks", sub: "google-oauth2|110169484474386276334"}, status: 200,
			check: func(t *testing.T, a answer) { require.JSONEq(t, `{"tasks":[],"next":null}`, string(a.body)) }},
		{name: "token without sub", c: withAuth(postKey(newKey()), "Bearer "+rawToken(map[string]any{"username": "alice"})), status: 401, code: idempotency.CodeUnauthenticated},
		notFound("another user's task, GET", call{method: http.MethodGet, path: "/tasks/" + aliceTask, sub: bob}, 0),
		notFound("another user's task, PATCH", call{method: http.MethodPatch, path: "/tasks/" + aliceTask, keys: []string{newKey()}, body: []byte(`{"title":"mine"}`), sub: bob}, 1),
		notFound("another user's task, DELETE", call{method: http.MethodDelete, path: "/tasks/" + aliceTask, keys: []string{newKey()}, sub: bob}, 1),
		{name: "another user's cursor", c: call{method: http.MethodGet, path: "/tasks?cursor=" + *bobPage.Next, sub: alice}, status: 400, code: problem.CodeValidation},
		{name: "another user's key, same request: a task of bob's own", c: call{method: http.MethodPost, path: "/tasks", keys: []string{aliceKey}, body: aliceBody, sub: bob},
			status: 201, tasks: 1, keys: 1, check: func(t *testing.T, a answer) {
				require.False(t, a.replayed(), "bob must not get alice's stored answer")
				require.NotEqual(t, aliceTask, a.taskID(t))
			}},
		{name: "another user's key, other body: no 422", c: call{method: http.MethodPost, path: "/tasks", keys: []string{aliceKey}, body: []byte(`{"title":"bob's own"}`), sub: newUser()},
			status: 201, tasks: 1, keys: 1, check: func(t *testing.T, a answer) { require.False(t, a.replayed()) }},

		// Paths.
		notFound("GET id not a UUID", call{method: http.MethodGet, path: "/tasks/not-a-uuid", sub: alice}, 0),
		notFound("GET unknown id", call{method: http.MethodGet, path: "/tasks/" + newKey(), sub: alice}, 0),
		notFound("GET id a UUID v1", call{method: http.MethodGet, path: "/tasks/c232ab00-9414-11ec-b3c8-9e6bdeced846", sub: alice}, 0),
		notFound("GET id with an encoded NUL", call{method: http.MethodGet, path: "/tasks/%00", sub: alice}, 0),
		notFound("PATCH id not a UUID", call{method: http.MethodPatch, path: "/tasks/123", keys: []string{newKey()}, body: []byte(`{"status":"done"}`), sub: alice}, 1),
		notFound("DELETE unknown id", call{method: http.MethodDelete, path: "/tasks/" + newKey(), keys: []string{newKey()}, sub: alice}, 1),
		gatewaySays("path with two segments", call{method: http.MethodGet, path: "/tasks/a/b", sub: alice}, 404, gatewayNotFound),
		gatewaySays("method without a route (PUT)", call{method: http.MethodPut, path: "/tasks", keys: []string{newKey()}, body: []byte(`{"title":"x"}`), sub: alice}, 404, gatewayNotFound),
		gatewaySays("unknown path", call{method: http.MethodGet, path: "/nope", sub: alice}, 404, gatewayNotFound),
		{name: "limit 0", c: call{method: http.MethodGet, path: "/tasks?limit=0", sub: alice}, status: 400, code: problem.CodeValidation},
		{name: "limit 1000", c: call{method: http.MethodGet, path: "/tasks?limit=1000", sub: alice}, status: 400, code: problem.CodeValidation},
		{name: "limit not a number", c: call{method: http.MethodGet, path: "/tasks?limit=abc", sub: alice}, status: 400, code: problem.CodeValidation},
		{name: "cursor garbage", c: call{method: http.MethodGet, path: "/tasks?cursor=garbage", sub: alice}, status: 400, code: problem.CodeValidation},
	}

	fourxx := 0
	for _, tc := range cases {
		if tc.status >= 400 {
			fourxx++
		}
	}
	require.GreaterOrEqual(t, fourxx, 40)

	for _, tc := range cases {
		ok := t.Run(tc.name, func(t *testing.T) {
			beforeTasks := tableDumpOf(t, db, "tasks")
			before := countRows(t, db.Pool)
			a := do(t, w.URL, tc.c)
			require.Less(t, a.status, 500, "a client's error is never a 5xx: %s", a.body)
			require.Equal(t, tc.status, a.status, "%s", a.body)
			switch {
			case tc.gateway != "":
				require.Equal(t, "application/json", a.header.Get("Content-Type"))
				require.JSONEq(t, tc.gateway, string(a.body))
			case tc.status >= 400:
				require.Equal(t, tc.code, a.problem(t).Code)
			}
			if tc.check != nil {
				tc.check(t, a)
			}
			after := countRows(t, db.Pool)
			require.Equal(t, tc.tasks, after.Tasks-before.Tasks, "tasks")
			require.Equal(t, tc.keys, after.Keys-before.Keys, "idempotency_keys")
			if tc.tasks == 0 {
				require.Equal(t, beforeTasks, tableDumpOf(t, db, "tasks"), "no task changed")
			}
			if tc.keys == 1 && len(tc.c.keys) == 1 {
				var status, code int
				require.NoError(t, db.Pool.QueryRow(context.Background(),
					`SELECT CASE status WHEN 'completed' THEN 1 ELSE 0 END, coalesce(status_code, 0) FROM idempotency_keys WHERE user_id = $1 AND key = $2`,
					idempotency.SubjectUUID(tc.c.sub), strings.ToLower(strings.Trim(tc.c.keys[0], `"`))).Scan(&status, &code))
				require.Equal(t, 1, status, "the answer is stored")
				require.Equal(t, tc.status, code)
			}
		})
		if !ok {
			t.Logf("case %q failed", tc.name)
		}
	}

	// Bad base64: the gateway always encodes correctly, so this comes only
	// in a crafted event (sam local invoke -e); the decorator refuses it
	// before the claim.
	var base64Status int
	t.Run("body marked base64 but not base64 (event)", func(t *testing.T) {
		fns, err := taskfn.Build(context.Background(), func(k string) string {
			return workerEnv(db.URL, map[string]string{"LOG_LEVEL": "error"})[k]
		})
		require.NoError(t, err)
		t.Cleanup(fns.Close)
		h, _ := fns.Handler(taskfn.CreateTaskFunction)
		before := countRows(t, db.Pool)
		resp, err := h(context.Background(), badBase64Event(t, alice))
		require.NoError(t, err)
		base64Status = resp.StatusCode
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, resp.Body)
		require.Equal(t, problem.ContentType, resp.Headers["Content-Type"])
		var d problem.Details
		require.NoError(t, json.Unmarshal([]byte(resp.Body), &d))
		require.Equal(t, problem.CodeValidation, d.Code)
		require.Equal(t, before, countRows(t, db.Pool))
	})
	fourxx++

	failed := 0
	if t.Failed() {
		failed = 1
	}
	record(t, Result{
		Case:  "bad input through the local API",
		Tried: "keys (missing, empty, UUID v1/v7, wrong variant, too long, non-ASCII, two values, quoted and bare, reused), bodies (invalid JSON, wrong types, unknown fields, duplicates, invalid UTF-8, NUL, 20 000-deep nesting, 64 KiB, 7 MB, 11 MB, bad base64), identity (no or bad token, a sub that is not a UUID, another user's task, cursor and key), paths (ids not UUIDs, unknown ids, unknown routes), limits and cursors",
		Times: len(cases) + 1,
		Seen: fmt.Sprintf("%d refused with their documented 4xx (problem+json with a stable code, or API Gateway's own 401/404/413 body), %d accepted as documented (another user's key is another record; a subject that is not a UUID is a user of its own); bad base64 %d; no 5xx; row counts changed only where a 4xx is stored as the key's answer",
			fourxx, len(cases)+1-fourxx, base64Status),
		Lost: lostSummary(map[string]int{"failed cases": failed}),
	})
}

// tableDumpOf returns a table's rows as JSON, ordered by their text.
func tableDumpOf(t *testing.T, db *pgtest.DB, table string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(),
		`SELECT coalesce(json_agg(r ORDER BY r::text), '[]')::text FROM `+table+` r`).Scan(&s))
	return s
}

// badBase64Event is a POST /tasks event marked isBase64Encoded whose body
// is not base64.
func badBase64Event(t *testing.T, sub string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	return events.APIGatewayV2HTTPRequest{
		Version:         "2.0",
		RouteKey:        "POST /tasks",
		RawPath:         "/tasks",
		Headers:         map[string]string{"content-type": "application/octet-stream", "idempotency-key": newKey()},
		Body:            "!!! not base64 !!!",
		IsBase64Encoded: true,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:  "POST /tasks",
			AccountID: localapi.LocalAccountID,
			Stage:     localapi.Stage,
			RequestID: "bad-base64",
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: http.MethodPost, Path: "/tasks"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}},
			},
		},
	}
}
