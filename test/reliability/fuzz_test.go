package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
)

// fuzzMethods are the methods a fuzzed request may use.
var fuzzMethods = []string{http.MethodPost, http.MethodPatch, http.MethodDelete, http.MethodGet, http.MethodPut}

// FuzzRequest sends fuzzed requests through the local API Gateway to the
// task functions behind the idempotency decorator and checks the
// invariants: a client's error is never a 5xx; every error is problem+json
// with its status and a code (or one of the gateway's own answers); a
// stored answer replays byte for byte; the same key with another body is
// refused with 422 and changes nothing.
//
// keyMode picks the key: 0 a fresh UUID v4, 1 the fuzzed key, 2 none.
// subMode picks the user: 0 a valid user, 1 the fuzzed subject, 2 no token.
// A path "seed" is replaced by the path of an existing task.
func FuzzRequest(f *testing.F) {
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":"buy milk"}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":"x","description":null,"status":"done","due_date":"2030-01-31"}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":"x","extra":[[[[1]]]]}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", "{\"title\":\"a\\u0000b\"}", uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", "\x00\x01binary", uint8(0), "", "application/octet-stream")
	f.Add(uint8(0), "/tasks?b=2&a=1", uint8(0), "", `{ "title" : "spaced" }`, uint8(0), "", "text/plain")
	f.Add(uint8(1), "seed", uint8(0), "", `{"status":"in_progress"}`, uint8(0), "", "")
	f.Add(uint8(1), "seed", uint8(0), "", `{"due_date":null,"description":"d"}`, uint8(0), "", "")
	f.Add(uint8(1), "/tasks/not-a-uuid", uint8(0), "", `{"title":"x"}`, uint8(0), "", "")
	f.Add(uint8(2), "/tasks/00000000-0000-4000-8000-000000000000", uint8(0), "", "", uint8(0), "", "")
	f.Add(uint8(3), "seed", uint8(2), "", "", uint8(0), "", "")
	f.Add(uint8(3), "/tasks?limit=1&cursor=abc", uint8(2), "", "", uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(1), "01890a5d-ac96-774b-bcce-b302099a8057", `{"title":"x"}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(1), `"8E03978E-40D5-43E8-BC93-6894A57F9324"`, `{"title":"x"}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(2), "", `{"title":"x"}`, uint8(0), "", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":"x"}`, uint8(1), "not-a-uuid", "")
	f.Add(uint8(0), "/tasks", uint8(0), "", `{"title":"x"}`, uint8(2), "", "")
	f.Add(uint8(4), "/tasks", uint8(0), "", `{"title":"x"}`, uint8(0), "", "")
	f.Add(uint8(0), "/nope/%zz", uint8(0), "", "", uint8(0), "", "")

	db := apptest.New(f)
	handlers, err := wire(db.Pool, wiring{})
	require.NoError(f, err)
	routes, err := templateRoutes()
	require.NoError(f, err)
	gw, err := localapi.New(localapi.Config{Routes: routes, Handlers: handlers})
	require.NoError(f, err)
	srv := httptest.NewServer(gw)
	f.Cleanup(srv.Close)

	user := newUser()
	seed := do(f, srv.URL, call{method: http.MethodPost, path: "/tasks", keys: []string{newKey()}, body: taskBody("seed"), sub: user})
	require.Equal(f, http.StatusCreated, seed.status)
	seedPath := "/tasks/" + seed.taskID(f)

	f.Fuzz(func(t *testing.T, method uint8, path string, keyMode uint8, key, body string, subMode uint8, sub, contentType string) {
		c := call{method: fuzzMethods[int(method)%len(fuzzMethods)], path: path, body: []byte(body), contentType: contentType}
		if path == "seed" {
			c.path = seedPath
		}
		if !strings.HasPrefix(c.path, "/") {
			c.path = "/" + c.path
		}
		fresh := false
		switch keyMode % 3 {
		case 0:
			c.keys, fresh = []string{newKey()}, true
		case 1:
			c.keys = []string{key}
		}
		var tok string
		switch subMode % 3 {
		case 0:
			tok = token(t, user)
		case 1:
			if sub != "" {
				tok = token(t, sub)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		first, err := send(ctx, srv.URL, c, tok)
		if err != nil {
			return // a request the HTTP client itself refuses to send
		}
		checkAnswer(t, first)

		if !fresh || subMode%3 != 0 {
			return
		}
		var stored bool
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT EXISTS (SELECT 1 FROM idempotency_keys WHERE user_id = $1 AND key = $2 AND status = 'completed')`,
			user, c.keys[0]).Scan(&stored))
		if !stored {
			return
		}
		// A stored answer replays byte for byte.
		again, err := send(ctx, srv.URL, c, tok)
		require.NoError(t, err)
		requireReplay(t, first, again)

		// The same key with another body is refused and changes nothing.
		before := digest(t, db, user, c.keys[0])
		other := c
		other.body = append(append([]byte{}, c.body...), " \x00 another request"...)
		refused, err := send(ctx, srv.URL, other, tok)
		require.NoError(t, err)
		require.Equal(t, http.StatusUnprocessableEntity, refused.status, "%s", refused.body)
		require.Equal(t, idempotency.CodeKeyReused, refused.problem(t).Code)
		require.Equal(t, before, digest(t, db, user, c.keys[0]), "a refused duplicate changed the database")
		third, err := send(ctx, srv.URL, c, tok)
		require.NoError(t, err)
		requireReplay(t, first, third)
	})
}

// checkAnswer holds for every answer: no 5xx, and every error is
// problem+json or one of the gateway's own answers.
func checkAnswer(t *testing.T, a answer) {
	t.Helper()
	require.Less(t, a.status, 500, "a client's request got a 5xx: %s", a.body)
	if a.status < 400 {
		return
	}
	if a.header.Get("Content-Type") == "application/json" {
		var g struct {
			Message string `json:"message"`
		}
		require.NoError(t, json.Unmarshal(a.body, &g), "%s", a.body)
		allowed := map[int]string{401: "Unauthorized", 404: "Not Found", 413: "Request Entity Too Large"}
		require.Equal(t, allowed[a.status], g.Message, "an unexpected gateway answer %d %s", a.status, a.body)
		return
	}
	a.problem(t)
}

// requireReplay checks that again is the replay of first.
func requireReplay(t *testing.T, first, again answer) {
	t.Helper()
	require.Equal(t, first.status, again.status, "%s", again.body)
	require.True(t, again.replayed(), "a stored answer is marked as replayed")
	require.True(t, bytes.Equal(first.body, again.body), "the replay is not byte-exact:\n%q\n%q", first.body, again.body)
	require.Equal(t, first.header.Get("Content-Type"), again.header.Get("Content-Type"))
	require.Equal(t, first.header.Get("Location"), again.header.Get("Location"))
}

// digest sums up what a refused duplicate must not change: every task, the
// number of key records and the key's own record.
func digest(t *testing.T, db *pgtest.DB, user, key string) string {
	t.Helper()
	var s string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `
		SELECT (SELECT md5(coalesce(string_agg(t::text, ',' ORDER BY t.id), '')) FROM tasks t)
		    || ' ' || (SELECT count(*) FROM idempotency_keys)
		    || ' ' || (SELECT k::text FROM idempotency_keys k WHERE user_id = $1 AND key = $2)`, user, key).Scan(&s))
	return s
}
