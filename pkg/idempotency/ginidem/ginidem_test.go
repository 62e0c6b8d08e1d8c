package ginidem_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// quiet is the part of a Config that keeps the tests' output clean.
var quiet = idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}

// authenticate is the tests' authentication middleware: it keeps the user
// of the X-User header in gin's context, as a real one keeps a verified
// token's subject.
func authenticate(c *gin.Context) {
	if u := c.GetHeader("X-User"); u != "" {
		c.Set("user", u)
	}
}

// server serves r over real HTTP until the test ends.
func server(t *testing.T, r *gin.Engine) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(r)
	t.Cleanup(s.Close)
	return s
}

// reply is an answer as the client got it.
type reply struct {
	status int
	header http.Header
	body   string
}

// send sends a request with an idempotency key (none when key is "") as
// user (none when "").
func send(t *testing.T, s *httptest.Server, method, path, user, key, body string) reply {
	t.Helper()
	req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if user != "" {
		req.Header.Set("X-User", user)
	}
	if key != "" {
		req.Header.Set(idempotency.HeaderName, key)
	}
	resp, err := s.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

// requireProblem checks a refusal's status and code.
func requireProblem(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	require.Equal(t, idempotency.ProblemContentType, r.header.Get("Content-Type"))
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.Equal(t, code, p.Code)
}

// records lists what st keeps.
func records(t *testing.T, st *memstore.Store) []idemstore.Record {
	t.Helper()
	recs, err := st.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	return recs
}

// counted is a handler that answers 201 with how many times it ran.
func counted(runs *atomic.Int32) gin.HandlerFunc {
	return func(c *gin.Context) {
		c.JSON(http.StatusCreated, gin.H{"run": runs.Add(1)})
	}
}

// newMiddleware builds the middleware on st, reading the user set by
// authenticate; change adjusts the Config first.
func newMiddleware(t *testing.T, st idemstore.Store, change ...func(*idempotency.Config)) gin.HandlerFunc {
	t.Helper()
	cfg := idempotency.Config{Store: st, Subject: ginidem.SubjectFromKey("user"), Settings: quiet}
	for _, f := range change {
		f(&cfg)
	}
	mw, err := ginidem.Middleware(cfg)
	require.NoError(t, err)
	return mw
}

func TestSubjectFromKeyScopesKeysByUser(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(authenticate, newMiddleware(t, st))
	r.POST("/tasks", counted(&runs))
	s := server(t, r)

	key := uuid.NewString()
	alice := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	bob := send(t, s, http.MethodPost, "/tasks", "bob", key, `{}`)
	require.Equal(t, http.StatusCreated, alice.status)
	require.Equal(t, http.StatusCreated, bob.status)
	require.JSONEq(t, `{"run":1}`, alice.body)
	require.JSONEq(t, `{"run":2}`, bob.body, "one key of two users is two requests")

	again := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, alice.body, again.body, "each user's retry replays their own answer")
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 2, runs.Load())

	recs := records(t, st)
	require.Len(t, recs, 2, "two records, one per user")
	users := []string{recs[0].UserID, recs[1].UserID}
	require.ElementsMatch(t, []string{idempotency.SubjectUUID("alice"), idempotency.SubjectUUID("bob")}, users)
}

func TestNoUserIsRefused(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(authenticate, newMiddleware(t, st))
	r.POST("/tasks", counted(&runs))
	s := server(t, r)

	requireProblem(t, send(t, s, http.MethodPost, "/tasks", "", uuid.NewString(), `{}`), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
	require.Zero(t, runs.Load(), "the handler did not run")
	require.Empty(t, records(t, st), "nothing was claimed")
}

func TestSubjectFromKeyValueTypes(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	id := uuid.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		switch c.GetHeader("X-User") {
		case "uuid":
			c.Set("user", id) // a fmt.Stringer
		case "number":
			c.Set("user", 42)
		}
	}, newMiddleware(t, st))
	r.POST("/tasks", counted(&runs))
	s := server(t, r)

	require.Equal(t, http.StatusCreated, send(t, s, http.MethodPost, "/tasks", "uuid", uuid.NewString(), `{}`).status)
	recs := records(t, st)
	require.Len(t, recs, 1)
	require.Equal(t, id.String(), recs[0].UserID, "a uuid.UUID is its own subject")

	requireProblem(t, send(t, s, http.MethodPost, "/tasks", "number", uuid.NewString(), `{}`), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
	require.EqualValues(t, 1, runs.Load())
}

func TestUserFrom(t *testing.T) {
	t.Parallel()
	type principal struct{ Subject string }
	st := memstore.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(func(c *gin.Context) {
		if u := c.GetHeader("X-User"); u != "" {
			c.Set("principal", principal{Subject: u})
		}
	}, newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.Subject = ginidem.SubjectFrom(func(c *gin.Context) string {
			p, _ := c.MustGet("principal").(principal)
			return p.Subject
		})
	}))
	r.POST("/tasks", counted(&runs))
	s := server(t, r)

	require.Equal(t, http.StatusCreated, send(t, s, http.MethodPost, "/tasks", "carol", uuid.NewString(), `{}`).status)
	recs := records(t, st)
	require.Len(t, recs, 1)
	require.Equal(t, idempotency.SubjectUUID("carol"), recs[0].UserID)
}

// TestGinChain checks that the handlers after the middleware keep gin's
// writer and chain: headers set late, c.JSON, aborts, the status an outer
// middleware reads, and a replay or refusal that stops the chain.
func TestGinChain(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	var seen atomic.Value // the status and size gin's logger position sees
	r := gin.New()
	r.Use(func(c *gin.Context) {
		c.Next()
		seen.Store(fmt.Sprintf("%d %d", c.Writer.Status(), c.Writer.Size()))
	}, authenticate, newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.ReplayHeaders = []string{"X-Later"}
	}))
	r.POST("/tasks", func(c *gin.Context) {
		info, ok := idempotency.FromContext(c.Request.Context())
		require.True(t, ok, "the run's Info is in the request's context")
		c.Header("X-Later", "set by the handler")
		c.Header("X-Not-Kept", "1")
		c.JSON(http.StatusCreated, gin.H{"run": runs.Add(1), "key": info.Key})
	})
	r.POST("/forbidden", func(c *gin.Context) {
		c.AbortWithStatusJSON(http.StatusForbidden, gin.H{"error": "no"})
	}, counted(&runs))
	r.GET("/tasks", func(c *gin.Context) { c.String(http.StatusOK, "list") })
	s := server(t, r)

	key := uuid.NewString()
	first := send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"a"}`)
	require.Equal(t, http.StatusCreated, first.status)
	require.JSONEq(t, `{"run":1,"key":"`+key+`"}`, first.body)
	require.Equal(t, "set by the handler", first.header.Get("X-Later"))
	require.Equal(t, "1", first.header.Get("X-Not-Kept"))
	require.Equal(t, "application/json; charset=utf-8", first.header.Get("Content-Type"))
	require.Equal(t, fmt.Sprintf("201 %d", len(first.body)), seen.Load(), "the outer middleware sees the answer on gin's writer")

	replay := send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"a"}`)
	require.Equal(t, first.body, replay.body)
	require.Equal(t, "true", replay.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "set by the handler", replay.header.Get("X-Later"), "a listed header is replayed")
	require.Empty(t, replay.header.Get("X-Not-Kept"))
	require.Equal(t, first.header.Get("Content-Type"), replay.header.Get("Content-Type"))
	require.Equal(t, fmt.Sprintf("201 %d", len(first.body)), seen.Load())
	require.EqualValues(t, 1, runs.Load(), "a replay stops the chain")

	requireProblem(t, send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"b"}`), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
	require.Regexp(t, `^422 \d+$`, seen.Load())

	forbidden := uuid.NewString()
	abort := send(t, s, http.MethodPost, "/forbidden", "alice", forbidden, `{}`)
	require.Equal(t, http.StatusForbidden, abort.status)
	require.JSONEq(t, `{"error":"no"}`, abort.body)
	again := send(t, s, http.MethodPost, "/forbidden", "alice", forbidden, `{}`)
	require.Equal(t, http.StatusForbidden, again.status)
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader), "an abort's answer is kept like any 4xx")
	require.EqualValues(t, 1, runs.Load(), "the handler after the abort never ran")

	before := len(records(t, st))
	list := send(t, s, http.MethodGet, "/tasks", "", "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Equal(t, "list", list.body)
	require.Len(t, records(t, st), before, "a GET passes through without touching the store")
}

// TestPanicRecovered checks that a panic releases the key and reaches gin's
// Recovery, which answers on the real response, and that the retry runs.
func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) {
		c.AbortWithStatusJSON(http.StatusInternalServerError, gin.H{"error": "recovered"})
	}), authenticate, newMiddleware(t, st))
	r.POST("/tasks", func(c *gin.Context) {
		if runs.Add(1) == 1 {
			c.Header("X-Half", "written before the panic")
			panic("the first run fails")
		}
		c.JSON(http.StatusCreated, gin.H{"run": runs.Load()})
	})
	s := server(t, r)

	key := uuid.NewString()
	failed := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, http.StatusInternalServerError, failed.status)
	require.JSONEq(t, `{"error":"recovered"}`, failed.body)
	require.Empty(t, failed.header.Get("X-Half"), "nothing of the failed run's buffer reaches the client")
	require.Empty(t, records(t, st), "the key was released")

	retry := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, http.StatusCreated, retry.status)
	require.JSONEq(t, `{"run":2}`, retry.body)
	require.EqualValues(t, 2, runs.Load())
}

func TestParamKey(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	r := gin.New()
	r.Use(authenticate)
	r.POST("/operations/:operation", newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.Key = ginidem.ParamKey("operation")
		cfg.KeyFormat = idempotency.KeyOpaque
	}), counted(&runs))
	s := server(t, r)

	first := send(t, s, http.MethodPost, "/operations/op-1", "alice", "", `{}`)
	require.Equal(t, http.StatusCreated, first.status)
	replay := send(t, s, http.MethodPost, "/operations/op-1", "alice", "", `{}`)
	require.Equal(t, "true", replay.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, first.body, replay.body)
	require.Equal(t, http.StatusCreated, send(t, s, http.MethodPost, "/operations/op-2", "alice", "", `{}`).status)
	require.EqualValues(t, 2, runs.Load())
}

func TestMiddlewareNeedsUserID(t *testing.T) {
	t.Parallel()
	_, err := ginidem.Middleware(idempotency.Config{Store: memstore.New()})
	require.ErrorContains(t, err, "Config.Subject")
}
