package storetest

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
)

// optionCases are answers once found wrong where options meet. Callers were
// merged into one user, and cookies split on replay. The middleware misjudged
// methods and bodies. Replays lost the body's encoding. Tokens were refused for
// being sent in both of a REST API's header maps. A store that is not the run's
// took a completion.
var optionCases = []behaviourCase{
	{"two sessions of one IAM role are two users", func(t *testing.T, e *env) {
		if e.p.name != "function-url" {
			t.Skip("only a Function URL carries an IAM principal")
		}
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.Subject = idempotency.IAMPrincipal })
		alice := e.post(`{"title":"alice's"}`)
		alice.arn = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_0123456789abcdef/alice@example.com"
		first := e.do(inv, alice)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, alice))
		// Bob signs with the same role and his own session, and sends
		// Alice's key: his request is his own, never Alice's response.
		bob := alice
		bob.arn = "arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_0123456789abcdef/bob@example.com"
		theirs := e.do(inv, bob)
		require.Equal(t, http.StatusCreated, theirs.StatusCode)
		require.Empty(t, theirs.Headers.Get(idempotency.ReplayedHeader), "Bob does not get Alice's stored response")
		require.NotEqual(t, first.Body, theirs.Body)
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a cookie with a line break replays as the one cookie it was", func(t *testing.T, e *env) {
		cookies := []string{"theme=dark\nadmin=1; Path=/", "session=abc; Path=/; HttpOnly"}
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusCreated, Headers: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": cookies}, Body: `{}`}, nil
		}, func(c *idempotency.Config) { c.ReplayHeaders = []string{"Set-Cookie"} })
		first := e.do(inv, e.post(`{}`))
		sent := first.Headers.Values("Set-Cookie")
		require.Len(t, sent, 2)
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.Equal(t, sent, replay.Headers.Values("Set-Cookie"), "exactly the first response's cookies, byte for byte")
		for _, c := range replay.Headers.Values("Set-Cookie") {
			require.False(t, strings.HasPrefix(c, "admin="), "no cookie is injected: %q", c)
		}
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"methods are protected in any case", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusOK))
		for _, method := range []string{"post", "patch", "Delete"} {
			e.key = uuid.NewString()
			req := e.post(`{}`)
			req.method = method
			before := e.runs.Load()
			first := e.do(inv, req)
			if first.StatusCode == http.StatusMethodNotAllowed {
				// A router that knows methods (chi) refuses the method
				// itself: nothing ran, so nothing can run twice.
				require.Equal(t, before, e.runs.Load(), method)
				continue
			}
			require.Equal(t, http.StatusOK, first.StatusCode, method)
			requireReplay(t, first, e.do(inv, req))
			require.Equal(t, before+1, e.runs.Load(), "%s runs once", method)
		}
	}},
	{"a replay keeps the body's Content-Encoding", func(t *testing.T, e *env) {
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		_, _ = w.Write([]byte(`{"compressed":true}`))
		require.NoError(t, w.Close())
		body := base64.StdEncoding.EncodeToString(gz.Bytes())
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusCreated, Headers: http.Header{"Content-Type": {"application/json"}, "Content-Encoding": {"gzip"}}, Body: body, IsBase64Encoded: true}, nil
		})
		req := e.post(`{}`)
		req.headers["Accept-Encoding"] = "gzip" // the client decodes itself
		first := e.do(inv, req)
		require.Equal(t, "gzip", first.Headers.Get("Content-Encoding"))
		replay := e.do(inv, req)
		requireReplay(t, first, replay)
		require.Equal(t, "gzip", replay.Headers.Get("Content-Encoding"), "the replayed bytes are still marked gzip")
		require.Equal(t, first.Body, replay.Body)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a bearer token sent once is one token in every shape", func(t *testing.T, e *env) {
		verify := func(_ context.Context, token string) (string, error) {
			if token != "tok-"+e.user {
				return "", nil
			}
			return e.user, nil
		}
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.Subject = idempotency.BearerToken(verify) })
		req := e.post(`{}`)
		req.sub = ""
		req.headers["Authorization"] = "Bearer tok-" + e.user
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode, "body: %s", first.Body)
		requireReplay(t, first, e.do(inv, req))
	}},
	{"a completion taken by another store than the run's is refused, and the engine completes", func(t *testing.T, e *env) {
		// Only the run's own store may write its completion in the
		// handler's transaction: any other (the case's store wraps the real
		// one) is refused, nothing is handed out, and the engine completes
		// the record itself.
		var refused []bool
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			resp, err := e.respond(http.StatusCreated)(ctx, req)
			if run, ok := runctx.From(ctx); ok {
				_, taken, takeErr := run.TakeCompletion(struct{}{}, apigw.ToResponse[events.APIGatewayV2HTTPResponse](resp))
				refused = append(refused, takeErr != nil && !taken)
			}
			return resp, err
		})
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, []bool{true}, refused)
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a binary body under the limit is accepted by its size in bytes", func(t *testing.T, e *env) {
		raw := bytes.Repeat([]byte{0xff, 0x00, 0x80}, 300) // 900 bytes, 1200 as base64
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.MaxBodyBytes = 1000 })
		req := e.post(base64.StdEncoding.EncodeToString(raw))
		req.b64 = true
		req.headers["Content-Type"] = "application/octet-stream"
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode, "body: %s", first.Body)
		requireReplay(t, first, e.do(inv, req))
		e.key = uuid.NewString()
		over := e.post(base64.StdEncoding.EncodeToString(append(raw, bytes.Repeat([]byte{0xff}, 101)...)))
		over.b64 = true
		requireProblem(t, e.do(inv, over), http.StatusRequestEntityTooLarge, idempotency.CodePayloadTooLarge)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a run whose renewal is refused for good is stopped, not raced", func(t *testing.T, e *env) {
		const beat = 300 * time.Millisecond
		e.store.refuseRenew.Store(true)
		b := e.blocking(func(int32) int { return http.StatusCreated })
		inv := e.wrap(b.handler, withHeartbeat(beat))
		first := e.async(inv, e.post(`{}`))
		<-b.started
		firstResp := <-first // the blocking handler answers 500 once its context ends
		require.Equal(t, http.StatusInternalServerError, firstResp.StatusCode)
		b.mu.Lock()
		cause := b.cause
		b.mu.Unlock()
		require.True(t, idemstore.IsPermanent(cause), "the run learns why: %v", cause)
		require.EqualValues(t, 1, e.store.renews.Load(), "a renewal that cannot succeed is not repeated")
		line := e.logLine("released")
		require.Equal(t, true, line["permanent"])
		b.releaseAll()
	}},
	{"a store that refuses the claim for good gives 500 without Retry-After, after one claim", func(t *testing.T, e *env) {
		e.store.refuseClaim.Store(true)
		inv := e.wrap(e.respond(http.StatusCreated))
		resp := e.do(inv, e.post(`{}`))
		requireProblem(t, resp, http.StatusInternalServerError, idempotency.CodeStoreMisconfigured)
		require.Empty(t, resp.Headers.Get("Retry-After"), "no invitation to retry what cannot succeed")
		require.Zero(t, e.runs.Load(), "fail closed")
		require.EqualValues(t, 1, e.store.claims.Load(), "no second claim")
		require.Zero(t, e.store.releases.Load(), "no release: nothing was written")
		line := e.logLine("store_error")
		require.Equal(t, true, line["permanent"])
		require.Equal(t, idempotency.CodeStoreMisconfigured, line["reason"])
		e.requireMetric("store_permanent")
	}},
	{"a response too large for the store keeps its key completed, and the retry gets 422", func(t *testing.T, e *env) {
		e.store.tooLarge.Store(true)
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode, "the first client gets the handler's response")
		require.EqualValues(t, 2, e.store.completes.Load(), "the refused completion, then the marker; nothing retried")
		for range 2 {
			retry := e.do(inv, e.post(`{}`))
			requireProblem(t, retry, http.StatusUnprocessableEntity, idempotency.CodeResponseNotKept)
			require.Empty(t, retry.Headers.Get("Retry-After"))
		}
		require.EqualValues(t, 1, e.runs.Load(), "the handler never runs twice")
		require.Equal(t, []string{"not_kept", "replayed", "replayed"}, e.outcomes())
		e.requireMetric("not_kept")
	}},
	{"a request with a nil body is an empty one", func(t *testing.T, e *env) {
		if e.p.name != "net/http" {
			t.Skip("only net/http requests have a Body that can be nil")
		}
		mw, err := idempotency.Middleware(idempotency.Config{
			Store:   e.store,
			Subject: idempotency.StaticSubject(e.user),
			Settings: idempotency.Settings{
				Clock:   e.clock.Now,
				Logger:  testLogger(e),
				Metrics: e.metrics,
			},
		})
		require.NoError(t, err)
		h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			e.runs.Add(1)
			w.WriteHeader(http.StatusNoContent)
		}))
		for range 2 {
			req, err := http.NewRequest(http.MethodDelete, "/tasks/1", nil)
			require.NoError(t, err)
			require.Nil(t, req.Body)
			req.Header.Set("Idempotency-Key", e.key)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusNoContent, rec.Code)
		}
		require.EqualValues(t, 1, e.runs.Load(), "the second is a replay")
		require.Equal(t, []string{"completed", "replayed"}, e.outcomes())
	}},
}

// testLogger is the case's JSON logger, as env.wrap gives it.
func testLogger(e *env) *slog.Logger { return slog.New(slog.NewJSONHandler(e.logs, nil)) }
