package storetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// runHTTP runs the decorator's HTTP behaviour table against the
// Store that newStore returns, once for each API Gateway payload version,
// for a Lambda Function URL and an ALB target, and once through Middleware
// over real HTTP (see runMiddleware).
// newStore is called once per payload version; the cases share that Store
// and run in parallel, each with its own users and keys, its own clock and
// its own view of the Store's calls, so the Store must be safe for
// concurrent use (as every Store must).
func runHTTP(t *testing.T, newStore func(t *testing.T) idemstore.Store) {
	t.Helper()
	for _, p := range payloads {
		runPayload(t, p, newStore)
	}
}

// runPayload runs the table, but the cases p has no form for, through p.
func runPayload(t *testing.T, p payload, newStore func(t *testing.T) idemstore.Store) {
	t.Run(p.name, func(t *testing.T) {
		t.Parallel()
		store := newStore(t)
		for _, c := range slices.Concat(cases, faultCases, optionCases, cacheWaitHeartbeatCases, keyCases) {
			if p.skip[c.name] {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				c.run(t, newEnv(t, p, store))
			})
		}
	})
}

// env is one case's world: a fresh user and key, a fake clock, a counting
// Store and the log and metric lines written.
type env struct {
	t       *testing.T
	p       payload
	store   *faultyStore
	clock   *fakeClock
	logs    *logBuffer
	metrics *logBuffer
	runs    atomic.Int32
	user    string
	key     string
}

func newEnv(t *testing.T, p payload, store idemstore.Store) *env {
	return &env{
		t:       t,
		p:       p,
		store:   &faultyStore{inner: store},
		clock:   newFakeClock(),
		logs:    &logBuffer{},
		metrics: &logBuffer{},
		user:    uuid.NewString(),
		key:     uuid.NewString(),
	}
}

// wrap wraps h for this case's payload version with the case's Store,
// clock, logger and metrics, after applying mods to the Config.
func (e *env) wrap(h handler, mods ...func(*idempotency.Config)) invoker {
	cfg := idempotency.Config{
		Store: e.store,
		Settings: idempotency.Settings{
			Clock:   e.clock.Now,
			Logger:  slog.New(slog.NewJSONHandler(e.logs, nil)),
			Metrics: e.metrics,
		},
	}
	for _, m := range mods {
		m(&cfg)
	}
	return e.p.wrap(e.t, h, cfg)
}

// post is a protected JSON request with the case's user and key.
func (e *env) post(body string) request {
	return request{
		method:  http.MethodPost,
		path:    "/tasks",
		headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": e.key},
		body:    body,
		sub:     e.user,
	}
}

// respond returns a handler that counts its runs and answers with status,
// a body naming the run, Content-Type, Location and X-Run headers.
func (e *env) respond(status int) handler {
	return func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
		n := e.runs.Add(1)
		return apigw.Response{
			StatusCode: status,
			Headers: http.Header{
				"Content-Type": {"application/json"},
				"Location":     {fmt.Sprintf("/tasks/%d", n)},
				"X-Run":        {fmt.Sprint(n)},
			},
			Body: fmt.Sprintf(`{"run": %d,  "spaced" : true}`, n),
		}, nil
	}
}

func (e *env) do(inv invoker, r request) apigw.Response {
	e.t.Helper()
	resp, err := inv(context.Background(), r)
	require.NoError(e.t, err)
	return resp
}

// outcomes returns the outcome of every decorator log line so far.
func (e *env) outcomes() []string {
	var out []string
	for _, line := range jsonLines(e.t, e.logs) {
		if line["msg"] == "idempotency" {
			out = append(out, fmt.Sprint(line["outcome"]))
		}
	}
	return out
}

// requireMetric checks that an EMF line counted outcome in namespace ichido.
func (e *env) requireMetric(outcome string) {
	e.t.Helper()
	for _, line := range jsonLines(e.t, e.metrics) {
		if line[outcome] != float64(1) {
			continue
		}
		aws, ok := line["_aws"].(map[string]any)
		require.True(e.t, ok, "EMF line without _aws: %v", line)
		require.NotZero(e.t, aws["Timestamp"])
		directives, ok := aws["CloudWatchMetrics"].([]any)
		require.True(e.t, ok && len(directives) == 1, "EMF line without one CloudWatchMetrics directive: %v", line)
		d := directives[0].(map[string]any)
		require.Equal(e.t, idempotency.DefaultNamespace, d["Namespace"])
		require.Contains(e.t, d["Metrics"], map[string]any{"Name": outcome, "Unit": "Count"})
		return
	}
	require.Failf(e.t, "no EMF line counts the outcome", "outcome %q, metric lines %v", outcome, jsonLines(e.t, e.metrics))
}

// requireProblem checks an RFC 9457 problem response with a stable code and
// no internal text.
func requireProblem(t *testing.T, resp apigw.Response, status int, code string) problem.Details {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, "body: %s", resp.Body)
	require.Equal(t, problem.ContentType, resp.Headers.Get("Content-Type"))
	var d problem.Details
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &d))
	require.Equal(t, code, d.Code)
	require.Equal(t, status, d.Status)
	require.NotEmpty(t, d.Type)
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.Detail)
	require.NotContains(t, resp.Body, errInjected.Error())
	require.Empty(t, resp.Headers.Get(idempotency.ReplayedHeader))
	return d
}

// requireReplay checks that replay repeats first byte for byte, with the
// content headers and the Idempotent-Replayed mark.
func requireReplay(t *testing.T, first, replay apigw.Response) {
	t.Helper()
	require.Equal(t, first.StatusCode, replay.StatusCode)
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, first.IsBase64Encoded, replay.IsBase64Encoded)
	require.Equal(t, first.Headers.Get("Content-Type"), replay.Headers.Get("Content-Type"))
	require.Equal(t, first.Headers.Get("Location"), replay.Headers.Get("Location"))
	require.Equal(t, "true", replay.Headers.Get(idempotency.ReplayedHeader))
	require.Empty(t, first.Headers.Get(idempotency.ReplayedHeader))
}

type behaviourCase struct {
	name string
	run  func(t *testing.T, e *env)
}

var cases = []behaviourCase{
	{"first request runs and a retry replays it", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{"title": "write tests"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, `{"run": 1,  "spaced" : true}`, first.Body)
		require.Equal(t, "/tasks/1", first.Headers.Get("Location"))

		replay := e.do(inv, e.post(`{"title": "write tests"}`))
		requireReplay(t, first, replay)
		require.Empty(t, replay.Headers.Get("X-Run"), "only content headers are replayed")
		require.EqualValues(t, 1, e.runs.Load())
		require.Equal(t, []string{"completed", "replayed"}, e.outcomes())
		e.requireMetric("completed")
		e.requireMetric("claimed")
		e.requireMetric("replayed")
	}},
	{"the log line names key, user, method, path and store latency", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		e.do(inv, e.post(`{}`))
		lines := jsonLines(t, e.logs)
		require.Len(t, lines, 1)
		line := lines[0]
		require.Equal(t, "idempotency", line["msg"])
		require.Equal(t, "completed", line["outcome"])
		require.Equal(t, e.key, line["key"])
		require.Equal(t, e.user, line["user"])
		require.Equal(t, "POST", line["method"])
		require.Equal(t, "/tasks", line["path"])
		require.Equal(t, float64(201), line["status"])
		store, ok := line["store"].(map[string]any)
		require.True(t, ok, "no store group in %v", line)
		require.Contains(t, store, "claim_ms")
		require.Contains(t, store, "complete_ms")
	}},
	{"a non-JSON body replays byte for byte", func(t *testing.T, e *env) {
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusOK, Headers: http.Header{"Content-Type": {"text/plain; charset=utf-8"}}, Body: "line one\r\n  line two\t\n"}, nil
		})
		first := e.do(inv, e.post(`{}`))
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.Equal(t, "line one\r\n  line two\t\n", replay.Body)
		require.Equal(t, "text/plain; charset=utf-8", replay.Headers.Get("Content-Type"))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"an empty body replays as empty", func(t *testing.T, e *env) {
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusNoContent}, nil
		})
		req := e.post("")
		req.method = http.MethodDelete
		req.path = "/tasks/" + uuid.NewString()
		first := e.do(inv, req)
		replay := e.do(inv, req)
		requireReplay(t, first, replay)
		require.Equal(t, http.StatusNoContent, replay.StatusCode)
		require.Empty(t, replay.Body)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a JSON body that is not canonical replays as written", func(t *testing.T, e *env) {
		body := "{\n  \"b\": 1.50,\n\"a\":[ 1e3, \"\\u00e9\" ] }\n"
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusCreated, Headers: http.Header{"Content-Type": {"application/vnd.example+json"}}, Body: body}, nil
		})
		first := e.do(inv, e.post(`{}`))
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.Equal(t, body, replay.Body)
	}},
	{"a base64 response replays with its flag", func(t *testing.T, e *env) {
		raw := make([]byte, 256)
		for i := range raw {
			raw[i] = byte(i)
		}
		encoded := base64.StdEncoding.EncodeToString(raw)
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			e.runs.Add(1)
			return apigw.Response{StatusCode: http.StatusOK, Headers: http.Header{"Content-Type": {"application/octet-stream"}}, Body: encoded, IsBase64Encoded: true}, nil
		})
		first := e.do(inv, e.post(`{}`))
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.True(t, replay.IsBase64Encoded)
		require.Equal(t, encoded, replay.Body)
	}},
	{"a base64 request body is fingerprinted decoded", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(base64.StdEncoding.EncodeToString([]byte(`{"a":1,"b":[true,null]}`)))
		req.b64 = true
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		req.body = base64.StdEncoding.EncodeToString([]byte("{ \"b\" : [ true, null ],\n \"a\" : 1 }"))
		requireReplay(t, first, e.do(inv, req))
		requireReplay(t, first, e.do(inv, e.post(`{"b":[true,null],"a":1}`)))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a body marked base64 that is not base64 is refused", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post("not base64!")
		req.b64 = true
		requireProblem(t, e.do(inv, req), http.StatusBadRequest, problem.CodeValidation)
		require.Zero(t, e.runs.Load())
		require.Zero(t, e.store.calls())
	}},
	{"a retry that re-serialises the JSON body replays", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{"title":"x","tags":["a","b"],"meta":{"y":1,"x":2.0}}`))
		replay := e.do(inv, e.post("{\n  \"meta\": {\"x\": 2.0, \"y\": 1},\n  \"tags\": [\"a\", \"b\"],\n  \"title\": \"\\u0078\"\n}"))
		requireReplay(t, first, replay)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"the same key with another body is refused with 422", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		e.do(inv, e.post(`{"title":"a"}`))
		requireProblem(t, e.do(inv, e.post(`{"title":"b"}`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		requireProblem(t, e.do(inv, e.post(`{"title":"a","extra":null}`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		requireProblem(t, e.do(inv, e.post(`["title","a"]`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.EqualValues(t, 1, e.runs.Load())
		require.Equal(t, []string{"completed", "mismatch", "mismatch", "mismatch"}, e.outcomes())
		e.requireMetric("mismatch")
	}},
	{"the same key with another path, method or query is refused with 422", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusOK), func(c *idempotency.Config) { c.Methods = []string{"POST", "PATCH", "PUT"} })
		req := e.post(`{}`)
		req.method, req.path, req.query = http.MethodPatch, "/tasks/1", "a=1&b=2"
		e.do(inv, req)
		other := req
		other.path = "/tasks/2"
		requireProblem(t, e.do(inv, other), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		other = req
		other.method = http.MethodPut
		requireProblem(t, e.do(inv, other), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		other = req
		other.query = "a=1&b=3"
		requireProblem(t, e.do(inv, other), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		other = req
		other.query = ""
		requireProblem(t, e.do(inv, other), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"the same query in another order replays", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		req.query = "b=2&a=1&c=x%20y"
		first := e.do(inv, req)
		req.query = "c=x+y&a=1&b=2"
		requireReplay(t, first, e.do(inv, req))
	}},
	{"the same key while the first request runs gets 409", func(t *testing.T, e *env) {
		var inner apigw.Response
		var inv invoker
		inv = e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			inner = e.do(inv, e.post(`{}`))
			return e.respond(http.StatusCreated)(ctx, req)
		})
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireProblem(t, inner, http.StatusConflict, idempotency.CodeKeyInUse)
		require.Equal(t, "1", inner.Headers.Get("Retry-After"))
		require.Equal(t, []string{"in_progress", "completed"}, e.outcomes())
		e.requireMetric("in_progress")
		// The refused duplicate changed nothing: the first response replays.
		inv = e.wrap(e.respond(http.StatusCreated))
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
	}},
	{"of concurrent requests with one key exactly one runs", func(t *testing.T, e *env) {
		const n = 8
		release := make(chan struct{})
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			<-release // hold the claim until every other request has been answered
			return e.respond(http.StatusCreated)(ctx, req)
		})
		results := make(chan apigw.Response, n)
		for range n {
			go func() {
				resp, err := inv(context.Background(), e.post(`{}`))
				if err != nil {
					resp = apigw.Response{StatusCode: -1, Body: err.Error()}
				}
				results <- resp
			}()
		}
		var got []apigw.Response
		for range n - 1 {
			got = append(got, <-results)
		}
		close(release)
		got = append(got, <-results)
		statuses := map[int]int{}
		for _, r := range got {
			statuses[r.StatusCode]++
		}
		require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, statuses)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a missing key is refused with 400", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		delete(req.headers, "Idempotency-Key")
		requireProblem(t, e.do(inv, req), http.StatusBadRequest, idempotency.CodeKeyMissing)
		require.Zero(t, e.runs.Load())
		require.Zero(t, e.store.calls())
		require.Equal(t, []string{"rejected"}, e.outcomes())
		e.requireMetric("rejected")
	}},
	{"a malformed key is refused with 400", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		other := uuid.NewString()
		for _, bad := range []struct {
			header string
			multi  []string
		}{
			{header: ""},
			{header: "   "},
			{header: "not-a-uuid"},
			{header: "8e03978e-40d5-13e8-bc93-6894a57f9324"},   // version 1
			{header: "8e03978e-40d5-43e8-7c93-6894a57f9324"},   // NCS variant
			{header: "8e03978e40d543e8bc936894a57f9324"},       // no hyphens
			{header: "{8e03978e-40d5-43e8-bc93-6894a57f9324}"}, // braces
			{header: "urn:uuid:8e03978e-40d5-43e8-bc93-6894a57f9324"},
			{header: `"8e03978e-40d5-43e8-bc93-6894a57f9324`},   // unterminated sf-string
			{header: `" 8e03978e-40d5-43e8-bc93-6894a57f9324"`}, // space inside the sf-string
			{header: e.key + "," + other},                       // an HTTP API's joined repeat
			{header: e.key + ","},
			{multi: []string{e.key, other}},
		} {
			req := e.post(`{}`)
			if bad.multi != nil {
				delete(req.headers, "Idempotency-Key")
				req.multi = map[string][]string{"Idempotency-Key": bad.multi}
			} else {
				req.headers["Idempotency-Key"] = bad.header
			}
			requireProblem(t, e.do(inv, req), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		}
		require.Zero(t, e.runs.Load())
		require.Zero(t, e.store.calls())
	}},
	{"bare, quoted and upper-case forms name the same key", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		req.headers["Idempotency-Key"] = strings.ToUpper(e.key)
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		req.headers["Idempotency-Key"] = `"` + e.key + `"`
		requireReplay(t, first, e.do(inv, req))
		req.headers["Idempotency-Key"] = ` "` + e.key + `"` + "\t"
		requireReplay(t, first, e.do(inv, req))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"the header name is matched in any case", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		delete(req.headers, "Idempotency-Key")
		req.headers["IDEMPOTENCY-KEY"] = e.key
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		delete(req.headers, "IDEMPOTENCY-KEY")
		req.headers["idempotency-key"] = e.key
		requireReplay(t, first, e.do(inv, req))
	}},
	{"a key in multiValueHeaders is found, repeated identically or not", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		delete(req.headers, "Idempotency-Key")
		req.multi = map[string][]string{"idempotency-Key": {e.key}}
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		req.multi = map[string][]string{"Idempotency-Key": {e.key, `"` + e.key + `"`}}
		requireReplay(t, first, e.do(inv, req))
		// API Gateway v1 fills both maps; the same key in both is one key.
		req.headers["Idempotency-Key"] = e.key
		requireReplay(t, first, e.do(inv, req))
	}},
	{"a request without a user is refused with 401", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		req := e.post(`{}`)
		req.sub = ""
		requireProblem(t, e.do(inv, req), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
		// A user id in a header or the body counts for nothing.
		req.sub = ""
		req.headers["X-User-Id"] = e.user
		req.body = `{"user_id":"` + e.user + `","sub":"` + e.user + `"}`
		requireProblem(t, e.do(inv, req), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
		require.Zero(t, e.runs.Load())
		require.Zero(t, e.store.calls())
	}},
	{"a Lambda authorizer's context gives the user through an extractor", func(t *testing.T, e *env) {
		var info idempotency.Info
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			info, _ = idempotency.FromContext(ctx)
			return e.respond(http.StatusCreated)(ctx, req)
		}, func(c *idempotency.Config) { c.Subject = idempotency.AuthorizerContextField("userId") })
		req := e.post(`{}`)
		req.sub = ""
		req.lambda = map[string]any{"userId": strings.ToUpper(e.user), "principalId": "someone"}
		require.Equal(t, http.StatusCreated, e.do(inv, req).StatusCode)
		require.Equal(t, e.user, info.UserID)
	}},
	{"the handler sees key, user and fingerprint", func(t *testing.T, e *env) {
		var info idempotency.Info
		var ok bool
		var want string
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			info, ok = idempotency.FromContext(ctx)
			var err error
			want, err = idempotency.Fingerprint(req)
			require.NoError(t, err)
			return e.respond(http.StatusCreated)(ctx, req)
		})
		req := e.post(`{"a":1}`)
		req.headers["Idempotency-Key"] = strings.ToUpper(e.key)
		req.sub = strings.ToUpper(e.user)
		e.do(inv, req)
		require.True(t, ok)
		require.Equal(t, idempotency.Info{Key: e.key, UserID: e.user, Fingerprint: want}, info)
		require.Len(t, info.Fingerprint, 64)
	}},
	{"keys are scoped per user", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		first := e.do(inv, e.post(`{"title":"mine"}`))
		other := e.post(`{"title":"theirs"}`)
		other.sub = uuid.NewString()
		theirs := e.do(inv, other)
		require.Equal(t, http.StatusCreated, theirs.StatusCode)
		require.Empty(t, theirs.Headers.Get(idempotency.ReplayedHeader))
		require.NotEqual(t, first.Body, theirs.Body)
		requireReplay(t, theirs, e.do(inv, other))
		requireReplay(t, first, e.do(inv, e.post(`{"title":"mine"}`)))
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a handler error releases the key and a retry runs again", func(t *testing.T, e *env) {
		boom := errors.New("handler failed")
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			if e.runs.Add(1) == 1 {
				return apigw.Response{}, boom
			}
			return apigw.Response{StatusCode: http.StatusCreated, Body: `{"ok":true}`}, nil
		})
		_, err := inv(context.Background(), e.post(`{}`))
		require.ErrorIs(t, err, boom)
		second := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, second.StatusCode)
		require.Empty(t, second.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
		require.Equal(t, []string{"released", "completed"}, e.outcomes())
		e.requireMetric("released")
	}},
	{"a 5xx releases the key and is returned as is", func(t *testing.T, e *env) {
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			if e.runs.Add(1) == 1 {
				return apigw.Response{StatusCode: http.StatusBadGateway, Body: "upstream down"}, nil
			}
			return apigw.Response{StatusCode: http.StatusCreated}, nil
		})
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusBadGateway, first.StatusCode)
		require.Equal(t, "upstream down", first.Body)
		require.Equal(t, http.StatusCreated, e.do(inv, e.post(`{}`)).StatusCode)
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a panic releases the key and goes on", func(t *testing.T, e *env) {
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			if e.runs.Add(1) == 1 {
				panic("handler panicked")
			}
			return apigw.Response{StatusCode: http.StatusCreated}, nil
		})
		require.PanicsWithValue(t, "handler panicked", func() { _, _ = inv(context.Background(), e.post(`{}`)) })
		require.Equal(t, http.StatusCreated, e.do(inv, e.post(`{}`)).StatusCode)
		require.EqualValues(t, 2, e.runs.Load())
		require.Equal(t, []string{"released", "completed"}, e.outcomes())
	}},
	{"transient 4xx results are not stored", func(t *testing.T, e *env) {
		for _, status := range []int{http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests} {
			e.runs.Store(0)
			inv := e.wrap(e.respond(status))
			req := e.post(`{}`)
			req.headers["Idempotency-Key"] = uuid.NewString()
			require.Equal(t, status, e.do(inv, req).StatusCode)
			again := e.do(inv, req)
			require.Equal(t, status, again.StatusCode)
			require.Empty(t, again.Headers.Get(idempotency.ReplayedHeader))
			require.EqualValues(t, 2, e.runs.Load(), "status %d", status)
		}
	}},
	{"other 4xx results are stored and replayed", func(t *testing.T, e *env) {
		for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity} {
			e.runs.Store(0)
			inv := e.wrap(e.respond(status))
			req := e.post(`{}`)
			req.headers["Idempotency-Key"] = uuid.NewString()
			first := e.do(inv, req)
			requireReplay(t, first, e.do(inv, req))
			require.EqualValues(t, 1, e.runs.Load(), "status %d", status)
		}
	}},
	{"GET passes through without touching the store", func(t *testing.T, e *env) {
		var inCtx bool
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			_, inCtx = idempotency.FromContext(ctx)
			return e.respond(http.StatusOK)(ctx, req)
		})
		for _, method := range []string{http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodPut} {
			req := request{method: method, path: "/tasks", headers: map[string]string{"Idempotency-Key": "not-a-uuid"}}
			require.Equal(t, http.StatusOK, e.do(inv, req).StatusCode, method)
		}
		require.False(t, inCtx)
		require.EqualValues(t, 4, e.runs.Load())
		require.Zero(t, e.store.calls())
		require.Empty(t, e.outcomes())
	}},
	{"PUT is protected when configured", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusOK), func(c *idempotency.Config) { c.Methods = []string{"put"} })
		req := e.post(`{}`)
		req.method = http.MethodPut
		first := e.do(inv, req)
		requireReplay(t, first, e.do(inv, req))
		req.method = http.MethodPost
		require.Equal(t, http.StatusOK, e.do(inv, req).StatusCode)
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a failing store on claim gives 503 and the handler does not run", func(t *testing.T, e *env) {
		e.store.failClaim.Store(true)
		inv := e.wrap(e.respond(http.StatusCreated))
		resp := e.do(inv, e.post(`{}`))
		requireProblem(t, resp, http.StatusServiceUnavailable, idempotency.CodeStoreUnavailable)
		require.Equal(t, "1", resp.Headers.Get("Retry-After"))
		require.Zero(t, e.runs.Load())
		require.Equal(t, []string{"store_error"}, e.outcomes())
		e.requireMetric("store_error")
		e.store.failClaim.Store(false)
		require.Equal(t, http.StatusCreated, e.do(inv, e.post(`{}`)).StatusCode)
	}},
	{"a failing store on complete returns the response and keeps the key until its lease ends", func(t *testing.T, e *env) {
		e.store.failComplete.Store(true)
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.FinishTimeout = 300 * time.Millisecond })
		first := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		require.Equal(t, []string{"store_error"}, e.outcomes())
		e.store.failComplete.Store(false)
		requireProblem(t, e.do(inv, e.post(`{}`)), http.StatusConflict, idempotency.CodeKeyInUse)
		e.clock.Advance(idempotency.DefaultMaxLease + time.Second)
		second := e.do(inv, e.post(`{}`))
		require.Equal(t, http.StatusCreated, second.StatusCode)
		require.Empty(t, second.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"a failing store on release returns the handler's response", func(t *testing.T, e *env) {
		e.store.failRelease.Store(true)
		inv := e.wrap(e.respond(http.StatusInternalServerError), func(c *idempotency.Config) { c.FinishTimeout = 300 * time.Millisecond })
		require.Equal(t, http.StatusInternalServerError, e.do(inv, e.post(`{}`)).StatusCode)
		require.Equal(t, []string{"store_error"}, e.outcomes())
	}},
	{"the invocation deadline bounds the lease", func(t *testing.T, e *env) {
		// The deadline is on the real clock, as Lambda's; the lease is
		// the time left until it, on the injected clock.
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(10*time.Second))
		defer cancel()
		var during []apigw.Response
		var inv invoker
		inv = e.wrap(func(hctx context.Context, req idempotency.Request) (apigw.Response, error) {
			if e.runs.Add(1) == 1 {
				e.clock.Advance(11 * time.Second) // past the deadline, within the margin
				during = append(during, e.do(inv, e.post(`{}`)))
				e.clock.Advance(2 * time.Second) // past deadline + margin
				during = append(during, e.do(inv, e.post(`{}`)))
			}
			return apigw.Response{StatusCode: http.StatusCreated, Body: fmt.Sprintf(`{"run":%d}`, e.runs.Load())}, nil
		}, func(c *idempotency.Config) { c.LeaseMargin = 2 * time.Second })
		first, err := inv(ctx, e.post(`{}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, first.StatusCode, "the worker's own response is returned even when its lease was lost")
		requireProblem(t, during[0], http.StatusConflict, idempotency.CodeKeyInUse)
		require.Equal(t, http.StatusCreated, during[1].StatusCode, "a lease past deadline + margin is taken over")
		require.Equal(t, []string{"in_progress", "completed", "lease_lost"}, e.outcomes())
		e.requireMetric("lease_lost")
		// The record holds the response of the invocation that took over.
		requireReplay(t, during[1], e.do(inv, e.post(`{}`)))
	}},
	{"a record is gone after its TTL", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.TTL = time.Hour })
		first := e.do(inv, e.post(`{}`))
		e.clock.Advance(59 * time.Minute)
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		e.clock.Advance(2 * time.Minute)
		again := e.do(inv, e.post(`{"another":"body"}`))
		require.Equal(t, http.StatusCreated, again.StatusCode)
		require.Empty(t, again.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"listed replay headers are kept", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.ReplayHeaders = []string{"x-run"} })
		first := e.do(inv, e.post(`{}`))
		replay := e.do(inv, e.post(`{}`))
		requireReplay(t, first, replay)
		require.Equal(t, "1", replay.Headers.Get("X-Run"))
	}},
}
