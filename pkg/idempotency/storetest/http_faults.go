package storetest

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// faultCases are answers once found wrong under attack: too
// large bodies, bodies and queries that only looked alike, lost store
// replies and cookies.
var faultCases = []behaviourCase{
	{"a body over the limit is refused with 413 before the store", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		body := `{"title":"` + strings.Repeat("x", idempotency.DefaultMaxBodyBytes) + `"}`
		requireProblem(t, e.do(inv, e.post(body)), http.StatusRequestEntityTooLarge, idempotency.CodePayloadTooLarge)
		require.Zero(t, e.runs.Load(), "the handler does not run")
		require.Zero(t, e.store.calls(), "nothing is claimed or stored")
		require.Equal(t, []string{"too_large"}, e.outcomes())
		e.requireMetric("too_large")
		// The key is still free: the same key with a body within the limit runs.
		first := e.do(inv, e.post(`{"title":"x"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Empty(t, first.Headers.Get(idempotency.ReplayedHeader))
		// The limit counts bytes on every shape: a Lambda event's base64
		// body counts as the bytes it decodes to (over plain HTTP a body
		// arrives as its bytes, never as base64).
		if e.p.name != "net/http" {
			b64 := e.post(strings.Repeat("QUFB", idempotency.DefaultMaxBodyBytes/3+1))
			b64.b64 = true
			requireProblem(t, e.do(inv, b64), http.StatusRequestEntityTooLarge, idempotency.CodePayloadTooLarge)
		}
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a body with a repeated member is not the body without it", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{"title":"b"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		for _, body := range []string{`{"title":"a","title":"b"}`, `{"title":"b","title":"b"}`, `{"title":"b","\u0074itle":"a"}`} {
			requireProblem(t, e.do(inv, e.post(body)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		}
		require.EqualValues(t, 1, e.runs.Load())
		// Such a body is a request of its own, replayed when sent again.
		e.key = uuid.NewString()
		repeated := e.do(inv, e.post(`{"title":"a","title":"b"}`))
		require.Equal(t, http.StatusCreated, repeated.StatusCode)
		requireReplay(t, repeated, e.do(inv, e.post(`{"title":"a","title":"b"}`)))
	}},
	{"a query part that cannot be decoded is not its decoded look-alike", func(t *testing.T, e *env) {
		if e.p.name != "v2" {
			t.Skip("a REST API event carries its query parameters decoded already")
		}
		inv := e.wrap(e.respond(http.StatusCreated))
		for _, pair := range [][2]string{{"a=%zz", "a=%25zz"}, {"a=%zz%41", "a=%25zz%2541"}} {
			e.key = uuid.NewString()
			req := e.post(`{}`)
			req.query = pair[0]
			first := e.do(inv, req)
			require.Equal(t, http.StatusCreated, first.StatusCode)
			requireReplay(t, first, e.do(inv, req))
			req.query = pair[1]
			requireProblem(t, e.do(inv, req), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		}
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a claim whose reply was lost is recovered in the same invocation", func(t *testing.T, e *env) {
		e.store.lostClaimReplies.Store(1)
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode, "body: %s", first.Body)
		require.EqualValues(t, 1, e.runs.Load())
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		require.Equal(t, []string{"completed", "replayed"}, e.outcomes())
		e.requireMetric("store_retried")
	}},
	{"a claim that keeps failing after it committed is released, so the retry runs", func(t *testing.T, e *env) {
		e.store.lostClaimReplies.Store(2)
		inv := e.wrap(e.respond(http.StatusCreated))
		resp := e.do(inv, e.post(`{}`))
		requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.CodeStoreUnavailable)
		require.Equal(t, "1", resp.Headers.Get("Retry-After"))
		require.Zero(t, e.runs.Load())
		// The retry, a new invocation, is not locked out for the lease.
		retry := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, retry.StatusCode, "body: %s", retry.Body)
		require.EqualValues(t, 1, e.store.releases.Load(), "released with the claim's own owner token")
		require.Empty(t, retry.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 1, e.runs.Load())
		require.Equal(t, []string{"store_error", "completed"}, e.outcomes())
	}},
	{"a completion that fails once is retried and stored", func(t *testing.T, e *env) {
		e.store.failCompletes.Store(1)
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, []string{"completed"}, e.outcomes())
		e.requireMetric("store_retried")
		line := jsonLines(t, e.logs)[0]
		require.Equal(t, float64(2), line["store"].(map[string]any)["complete_calls"])
		// The retry replays at once, instead of 409 for the lease and a
		// second run of the handler after it.
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"cookies are replayed one by one when Set-Cookie is listed", func(t *testing.T, e *env) {
		cookies := []string{"session=abc; Path=/; HttpOnly", "pref=dark; Expires=Wed, 21 Oct 2026 07:28:00 GMT"}
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusCreated, Headers: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": cookies}, Body: `{}`}, nil
		}, func(c *idempotency.Config) { c.ReplayHeaders = []string{"set-cookie"} })
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, cookies, first.Headers.Values("Set-Cookie"))
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.Equal(t, cookies, replay.Headers.Values("Set-Cookie"), "each cookie as it was, none joined")
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"cookies are not replayed unless Set-Cookie is listed", func(t *testing.T, e *env) {
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusCreated, Headers: http.Header{"Set-Cookie": {"a=1", "b=2"}}, Body: `{}`}, nil
		})
		first := e.do(inv, e.post(`{}`))
		require.Len(t, first.Headers.Values("Set-Cookie"), 2)
		replay := e.do(inv, e.post(`{}`))
		require.Equal(t, "true", replay.Headers.Get(idempotency.ReplayedHeader))
		require.Empty(t, replay.Headers.Values("Set-Cookie"))
	}},
}
