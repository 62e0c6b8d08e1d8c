package storetest

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// requireRecord checks, through the Store's idemstore.Admin capability
// (every Store of this module has it; the check is skipped on one that does
// not), that the record a request or call left is kept under userID and key.
func requireRecord(t *testing.T, st *faultyStore, userID, key string, status idemstore.Status) {
	t.Helper()
	if _, ok := st.inner.(idemstore.Admin); !ok {
		return
	}
	rec, found, err := st.Get(context.Background(), userID, key)
	require.NoError(t, err)
	require.True(t, found, "no record under user %s, key %s", userID, key)
	require.Equal(t, status, rec.Status)
}

// withKey returns r with its key header replaced by name: value.
func withKey(r request, name, value string) request {
	r.headers = map[string]string{"Content-Type": "application/json", name: value}
	return r
}

// keyCases are the options a team coming from another identity
// provider, another key format or Powertools looks for.
var keyCases = []behaviourCase{
	{"a subject that is not a UUID has a user id of its own", func(t *testing.T, e *env) {
		var users []string
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			info, _ := idempotency.FromContext(ctx)
			users = append(users, info.UserID)
			return e.respond(http.StatusCreated)(ctx, req)
		})
		alice := e.post(`{}`)
		alice.sub = "auth0|" + e.user
		first := e.do(inv, alice)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, alice))
		// Another subject with the same key is another user: it runs.
		bob := alice
		bob.sub = "google-oauth2|" + e.user
		require.Empty(t, e.do(inv, bob).Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 2, e.runs.Load())
		require.Equal(t, []string{idempotency.SubjectUUID(alice.sub), idempotency.SubjectUUID(bob.sub)}, users)
		require.NotEqual(t, users[0], users[1])
		requireRecord(t, e.store, idempotency.SubjectUUID(alice.sub), e.key, idemstore.StatusCompleted)
		// A UUID subject is its own id, in any case.
		upper := e.post(`{}`)
		upper.sub = strings.ToUpper(e.user)
		first = e.do(inv, upper)
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		require.Equal(t, e.user, users[2])
	}},
	{"a subject that is the text of another user's id is another user, and replays none of theirs", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated))
		victim := e.post(`{}`)
		victim.sub = "auth0|victim-" + e.user
		require.Equal(t, http.StatusCreated, e.do(inv, victim).StatusCode)
		// The attacker's identity provider issued them the subject that is
		// the victim's id; they send the victim's (guessable) key.
		attacker := victim
		attacker.sub = idempotency.SubjectUUID(victim.sub)
		got := e.do(inv, attacker)
		require.Equal(t, http.StatusCreated, got.StatusCode)
		require.Empty(t, got.Headers.Get(idempotency.ReplayedHeader), "the victim's response was replayed to another user")
		require.EqualValues(t, 2, e.runs.Load())
	}},
	{"two tenants with the same user and key get records of their own", func(t *testing.T, e *env) {
		if e.p.name == "net/http" {
			t.Skip("a Lambda invocation's tenant (lambdacontext); a server's comes from Config.Tenant (a test of its own)")
		}
		var infos []idempotency.Info
		inv := e.wrap(func(ctx context.Context, req idempotency.Request) (apigw.Response, error) {
			info, _ := idempotency.FromContext(ctx)
			infos = append(infos, info)
			return e.respond(http.StatusCreated)(ctx, req)
		})
		in := func(tenant string) context.Context {
			return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString(), TenantID: tenant})
		}
		req := e.post(`{}`)
		a, err := inv(in("tenant-a"), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, a.StatusCode)
		b, err := inv(in("tenant-b"), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, b.StatusCode)
		require.Empty(t, b.Headers.Get(idempotency.ReplayedHeader), "another tenant's record was replayed")
		require.EqualValues(t, 2, e.runs.Load())
		again, err := inv(in("tenant-a"), req)
		require.NoError(t, err)
		requireReplay(t, a, again)
		none := e.do(inv, req) // no tenant: a third record
		require.Empty(t, none.Headers.Get(idempotency.ReplayedHeader))
		require.EqualValues(t, 3, e.runs.Load())
		require.Equal(t, "tenant-a", infos[0].Tenant)
		require.Equal(t, infos[0].UserID, infos[1].UserID, "the same user")
		requireRecord(t, e.store, idempotency.TenantUserID("tenant-b", idempotency.SubjectUUID(e.user)), e.key, idemstore.StatusCompleted)
	}},
	{"the key header is configurable", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.Key = idempotency.HeaderKey("X-Idempotency-Key") })
		req := withKey(e.post(`{}`), "x-idempotency-key", e.key)
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, req))
		d := requireProblem(t, e.do(inv, e.post(`{}`)), http.StatusBadRequest, idempotency.CodeKeyMissing)
		require.Contains(t, d.Detail, "X-Idempotency-Key", "the refusal names the header")
		d = requireProblem(t, e.do(inv, withKey(e.post(`{}`), "X-Idempotency-Key", "12345")), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "X-Idempotency-Key")
		require.Contains(t, d.Detail, "not a UUID version 4")
		require.EqualValues(t, 1, e.runs.Load())
		// One key sent in its two forms, quoted and bare, in one header
		// (a proxy that joins repeated headers): the same parser as the
		// default header, so the same key, a replay.
		both := withKey(e.post(`{}`), "X-Idempotency-Key", `"`+e.key+`", `+strings.ToUpper(e.key))
		requireReplay(t, first, e.do(inv, both))
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"an opaque key is accepted when configured and compared exactly", func(t *testing.T, e *env) {
		cfg := idempotency.Config{KeyFormat: idempotency.KeyOpaque}
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.KeyFormat = idempotency.KeyOpaque })
		key := "order-" + e.key + "_attempt/1"
		req := withKey(e.post(`{}`), "Idempotency-Key", key)
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, req))
		requireReplay(t, first, e.do(inv, withKey(req, "Idempotency-Key", `"`+key+`"`)))
		userID, recordKey, err := idempotency.HTTPRecordID(cfg.KeyPrefix, cfg.KeyFormat, e.user, key)
		require.NoError(t, err)
		requireRecord(t, e.store, userID, recordKey, idemstore.StatusCompleted)

		// Exact comparison: another case is another key.
		upper := withKey(req, "Idempotency-Key", strings.ToUpper(key))
		require.Empty(t, e.do(inv, upper).Headers.Get(idempotency.ReplayedHeader))
		// A comma inside an sf-string is part of the key.
		comma := withKey(req, "Idempotency-Key", `"a,b `+e.key+`"`)
		d := requireProblem(t, e.do(inv, comma), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "visible ASCII", "a space is not visible ASCII")
		comma = withKey(req, "Idempotency-Key", `"a,b-`+e.key+`"`)
		first = e.do(inv, comma)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, comma))
		require.EqualValues(t, 3, e.runs.Load())

		long := strings.Repeat("k", idempotency.MaxOpaqueKeyLength)
		require.Equal(t, http.StatusCreated, e.do(inv, withKey(req, "Idempotency-Key", long)).StatusCode)
		d = requireProblem(t, e.do(inv, withKey(req, "Idempotency-Key", long+"k")), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "longer than 255")
		d = requireProblem(t, e.do(inv, withKey(req, "Idempotency-Key", `"a\b"`)), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "sf-string")
		d = requireProblem(t, e.do(inv, withKey(req, "Idempotency-Key", `""`)), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "empty")
		require.EqualValues(t, 4, e.runs.Load())

		// The default format refuses the same key, saying why.
		strict := e.wrap(e.respond(http.StatusCreated))
		d = requireProblem(t, e.do(strict, req), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "not a UUID version 4")
	}},
	{"a request without a key runs unprotected when keys are optional", func(t *testing.T, e *env) {
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.AllowMissingKey = true })
		none := e.post(`{}`)
		delete(none.headers, "Idempotency-Key")
		for range 2 {
			resp := e.do(inv, none)
			require.Equal(t, http.StatusCreated, resp.StatusCode)
			require.Empty(t, resp.Headers.Get(idempotency.ReplayedHeader))
		}
		require.EqualValues(t, 2, e.runs.Load(), "each request without a key runs")
		require.Zero(t, e.store.calls(), "nothing is claimed or stored")
		require.Equal(t, []string{"unprotected", "unprotected"}, e.outcomes())
		e.requireMetric("unprotected")
		// A malformed key is still refused, a valid one still protects.
		requireProblem(t, e.do(inv, withKey(none, "Idempotency-Key", "12345")), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		first := e.do(inv, e.post(`{}`))
		requireReplay(t, first, e.do(inv, e.post(`{}`)))
		require.EqualValues(t, 3, e.runs.Load())
		// The user is still required.
		none.sub = ""
		requireProblem(t, e.do(inv, none), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
	}},
	{"the key can come from a body field", func(t *testing.T, e *env) {
		type orderBody struct {
			OrderID string `json:"order_id"`
		}
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) {
			c.KeyFormat = idempotency.KeyOpaque
			c.Key = idempotency.BodyKey(func(b orderBody) string { return b.OrderID })
		})
		req := e.post(`{"order_id":"ord-` + e.key + `","amount":5}`)
		delete(req.headers, "Idempotency-Key")
		first := e.do(inv, req)
		require.Equal(t, http.StatusCreated, first.StatusCode)
		requireReplay(t, first, e.do(inv, req))
		requireProblem(t, e.do(inv, e.post(`{"amount":5}`)), http.StatusBadRequest, idempotency.CodeKeyMissing)
		d := requireProblem(t, e.do(inv, e.post(`not json`)), http.StatusBadRequest, idempotency.CodeKeyInvalid)
		require.Contains(t, d.Detail, "not the JSON")
		// The key is the body's: the same order with another amount is
		// another request under the same key.
		requireProblem(t, e.do(inv, e.post(`{"order_id":"ord-`+e.key+`","amount":6}`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"the key can come from a path parameter", func(t *testing.T, e *env) {
		if e.p.name != "v1" && e.p.name != "v2" {
			t.Skip("only API Gateway routes carry pathParameters; net/http's are its pattern's (a test of its own)")
		}
		inv := e.wrap(e.respond(http.StatusOK), func(c *idempotency.Config) { c.Key = idempotency.PathKey("operation") })
		req := e.post(`{}`)
		delete(req.headers, "Idempotency-Key")
		req.path = "/operations/" + e.key
		req.params = map[string]string{"operation": e.key}
		first := e.do(inv, req)
		require.Equal(t, http.StatusOK, first.StatusCode)
		requireReplay(t, first, e.do(inv, req))
		req.params = nil
		requireProblem(t, e.do(inv, req), http.StatusBadRequest, idempotency.CodeKeyMissing)
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"a fingerprint of the parts that matter decides the mismatch", func(t *testing.T, e *env) {
		type payment struct {
			Amount   int    `json:"amount"`
			Currency string `json:"currency"`
		}
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) {
			c.Fingerprint = idempotency.FingerprintBody(func(p payment) any { return p })
		})
		first := e.do(inv, e.post(`{"amount":5,"currency":"EUR","note":"first"}`))
		require.Equal(t, http.StatusCreated, first.StatusCode)
		// Other fields, their order, the query: not part of the fingerprint.
		requireReplay(t, first, e.do(inv, e.post(`{"note":"retried","currency":"EUR","amount":5}`)))
		withQuery := e.post(`{"amount":5,"currency":"EUR"}`)
		withQuery.query = "trace=1"
		requireReplay(t, first, e.do(inv, withQuery))
		// The parts that matter, the method and the path are.
		requireProblem(t, e.do(inv, e.post(`{"amount":6,"currency":"EUR"}`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		otherPath := e.post(`{"amount":5,"currency":"EUR"}`)
		otherPath.path = "/payments"
		requireProblem(t, e.do(inv, otherPath), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		d := requireProblem(t, e.do(inv, e.post(`[1,2]`)), http.StatusBadRequest, idempotency.CodeValidation)
		require.Contains(t, d.Detail, "not the JSON")
		require.EqualValues(t, 1, e.runs.Load())
	}},
	{"the replay hook gets the record's times and changes the replay's headers", func(t *testing.T, e *env) {
		var replays []idempotency.Replay
		inv := e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) {
			c.OnReplay = func(_ context.Context, r *idempotency.Replay) {
				replays = append(replays, *r)
				r.Header.Set("X-Idempotency-Expires", r.ExpiresAt.UTC().Format(time.RFC3339))
				r.Header.Set("Content-Type", "application/vnd.replayed+json")
			}
		})
		claimedAt := e.clock.Now()
		first := e.do(inv, e.post(`{}`))
		require.Empty(t, replays, "the hook runs on replays only")
		e.clock.Advance(time.Minute)
		replay := e.do(inv, e.post(`{}`))
		require.Len(t, replays, 1)
		r := replays[0]
		require.Equal(t, e.key, r.Key)
		require.Equal(t, e.user, r.UserID)
		require.Equal(t, first.Body, r.Response.Body)
		require.Equal(t, http.StatusCreated, r.Response.StatusCode)
		require.True(t, claimedAt.Equal(r.CreatedAt), "created %s, want %s", r.CreatedAt, claimedAt)
		require.True(t, claimedAt.Add(idempotency.DefaultTTL).Equal(r.ExpiresAt), "expires %s, want completion + TTL", r.ExpiresAt)
		require.Equal(t, first.Body, replay.Body)
		require.Equal(t, "true", replay.Headers.Get(idempotency.ReplayedHeader))
		require.Equal(t, claimedAt.Add(idempotency.DefaultTTL).UTC().Format(time.RFC3339), replay.Headers.Get("X-Idempotency-Expires"))
		require.Equal(t, "application/vnd.replayed+json", replay.Headers.Get("Content-Type"))
		// A refusal is not a replay.
		requireProblem(t, e.do(inv, e.post(`{"other":1}`)), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
		require.Len(t, replays, 1)
	}},
	{"key prefixes keep two services apart on one store", func(t *testing.T, e *env) {
		prefixed := func(prefix string) invoker {
			return e.wrap(e.respond(http.StatusCreated), func(c *idempotency.Config) { c.KeyPrefix = prefix })
		}
		orders, billing := prefixed("orders"), prefixed("billing")
		first := e.do(orders, e.post(`{}`))
		other := e.do(billing, e.post(`{}`))
		require.Empty(t, other.Headers.Get(idempotency.ReplayedHeader), "another prefix is another record")
		require.EqualValues(t, 2, e.runs.Load())
		requireReplay(t, first, e.do(orders, e.post(`{}`)))
		requireReplay(t, other, e.do(billing, e.post(`{}`)))
		require.NotEqual(t, first.Body, other.Body)
		for _, prefix := range []string{"orders", "billing"} {
			userID, key, err := idempotency.HTTPRecordID(prefix, idempotency.KeyUUIDv4, e.user, e.key)
			require.NoError(t, err)
			require.NotEqual(t, e.key, key)
			requireRecord(t, e.store, userID, key, idemstore.StatusCompleted)
		}
		// Without a prefix, ADR 009's key is the record's.
		unprefixed := e.do(e.wrap(e.respond(http.StatusCreated)), e.post(`{}`))
		require.Empty(t, unprefixed.Headers.Get(idempotency.ReplayedHeader))
		requireRecord(t, e.store, e.user, e.key, idemstore.StatusCompleted)
	}},
}

// functionKeyCases are the same options for Function and SQSHandler.
var functionKeyCases = []functionCase{
	{"two tenants with the same scope and key get records of their own", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil)
		o := order{ID: uuid.NewString()}
		in := func(tenant string) context.Context {
			return lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString(), TenantID: tenant})
		}
		a, err := f(in("tenant-a"), o)
		require.NoError(t, err)
		b, err := f(in("tenant-b"), o)
		require.NoError(t, err)
		require.NotEqual(t, a.Run, b.Run, "another tenant's result was replayed")
		again, err := f(in("tenant-a"), o)
		require.NoError(t, err)
		require.Equal(t, a.Run, again.Run)
		require.EqualValues(t, 2, e.runsOf(o.ID))
	}},
	{"key prefixes keep two services' functions apart", func(t *testing.T, e *funcEnv) {
		orders := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) { c.KeyPrefix = "orders" })
		billing := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) { c.KeyPrefix = "billing" })
		o := order{ID: uuid.NewString()}
		a, err := orders(context.Background(), o)
		require.NoError(t, err)
		b, err := billing(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 1, a.Run)
		require.EqualValues(t, 2, b.Run, "the other prefix ran again")
		again, err := orders(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 1, again.Run)
		for _, prefix := range []string{"orders", "billing"} {
			userID, key, err := idempotency.FunctionRecordID(prefix, e.name, "", o.ID)
			require.NoError(t, err)
			requireRecord(t, e.store, userID, key, idemstore.StatusCompleted)
		}
	}},
	{"FunctionRecordID names the record of a call and of an SQS message", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) {
			c.Scope = func(_ context.Context, o order) (string, error) { return o.Note, nil }
		})
		o := order{ID: uuid.NewString(), Note: "tenant-7"}
		_, err := f(context.Background(), o)
		require.NoError(t, err)
		userID, key, err := idempotency.FunctionRecordID("", e.name, "tenant-7", o.ID)
		require.NoError(t, err)
		requireRecord(t, e.store, userID, key, idemstore.StatusCompleted)

		h := e.batchHandler(nil)
		m := sqsMessage(`{}`)
		_, err = h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
		require.NoError(t, err)
		userID, key, err = idempotency.FunctionRecordID("", e.name, "", m.MessageId)
		require.NoError(t, err)
		requireRecord(t, e.store, userID, key, idemstore.StatusCompleted)
	}},
	{"a call without a key runs unprotected when keys are optional", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) { c.AllowMissingKey = true })
		for range 2 {
			_, err := f(context.Background(), order{})
			require.NoError(t, err)
		}
		require.EqualValues(t, 2, e.runsOf(""), "each call without a key runs")
		require.Zero(t, e.store.calls())
		require.Contains(t, e.logs.String(), `"outcome":"unprotected"`)
		strict := e.newOrder(nil)
		_, err := strict(context.Background(), order{})
		require.ErrorIs(t, err, idempotency.ErrNoKey)
		require.EqualValues(t, 2, e.runsOf(""))

		// An SQS record whose body has no key runs too.
		h := e.batchHandler(nil, func(c *idempotency.FunctionConfig[events.SQSMessage]) {
			c.AllowMissingKey = true
			c.Key = idempotency.SQSBodyKey(func(o order) string { return o.ID })
		})
		m := sqsMessage(`{"items":1}`)
		for range 2 {
			resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
			require.NoError(t, err)
			require.Empty(t, resp.BatchItemFailures)
		}
		require.EqualValues(t, 2, e.runsOf(m.MessageId))
	}},
	{"the replay hook of a function gets the stored result, without an HTTP status, and the record's times", func(t *testing.T, e *funcEnv) {
		var replays atomic.Int32
		var got idempotency.Replay
		f := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) {
			c.OnReplay = func(_ context.Context, r *idempotency.Replay) {
				replays.Add(1)
				got = *r
			}
		})
		o := order{ID: uuid.NewString()}
		claimedAt := e.clock.Now()
		first, err := f(context.Background(), o)
		require.NoError(t, err)
		require.Zero(t, replays.Load())
		_, err = f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 1, replays.Load())
		require.Equal(t, o.ID, got.Key)
		var stored receipt
		require.NoError(t, json.Unmarshal([]byte(got.Response.Body), &stored))
		require.Equal(t, first.Run, stored.Run)
		require.Zero(t, got.Response.StatusCode, "a result has no HTTP status")
		require.Empty(t, got.Response.Headers, "nor headers")
		require.True(t, claimedAt.Equal(got.CreatedAt), "created %s, want %s", got.CreatedAt, claimedAt)
		require.True(t, claimedAt.Add(idempotency.DefaultTTL).Equal(got.ExpiresAt))
	}},
}
