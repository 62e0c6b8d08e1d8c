package echoidem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/echoidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// quiet is the part of a Config that keeps the tests' output clean.
var quiet = idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}

// authenticate is the tests' authentication middleware: it keeps the user
// of the X-User header in Echo's context, as a real one keeps a verified
// token's subject.
func authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if u := c.Request().Header.Get("X-User"); u != "" {
			c.Set("user", u)
		}
		return next(c)
	}
}

// server serves e over real HTTP until the test ends.
func server(t *testing.T, e *echo.Echo) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(e)
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
func counted(runs *atomic.Int32) echo.HandlerFunc {
	return func(c echo.Context) error {
		return c.JSON(http.StatusCreated, map[string]int32{"run": runs.Add(1)})
	}
}

// newMiddleware builds the middleware on st, reading the user set by
// authenticate; change adjusts the Config first.
func newMiddleware(t *testing.T, st idemstore.Store, change ...func(*idempotency.Config)) echo.MiddlewareFunc {
	t.Helper()
	cfg := idempotency.Config{Store: st, Subject: echoidem.SubjectFromKey("user"), Settings: quiet}
	for _, f := range change {
		f(&cfg)
	}
	mw, err := echoidem.Middleware(cfg)
	require.NoError(t, err)
	return mw
}

func TestSubjectFromKeyScopesKeysByUser(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	e := echo.New()
	e.Use(authenticate, newMiddleware(t, st))
	e.POST("/tasks", counted(&runs))
	s := server(t, e)

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
	e := echo.New()
	e.Use(authenticate, newMiddleware(t, st))
	e.POST("/tasks", counted(&runs))
	s := server(t, e)

	requireProblem(t, send(t, s, http.MethodPost, "/tasks", "", uuid.NewString(), `{}`), http.StatusUnauthorized, idempotency.CodeUnauthenticated)
	require.Zero(t, runs.Load(), "the handler did not run")
	require.Empty(t, records(t, st), "nothing was claimed")
}

func TestSubjectFromKeyValueTypes(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	id := uuid.New()
	var runs atomic.Int32
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			switch c.Request().Header.Get("X-User") {
			case "uuid":
				c.Set("user", id) // a fmt.Stringer
			case "number":
				c.Set("user", 42)
			}
			return next(c)
		}
	}, newMiddleware(t, st))
	e.POST("/tasks", counted(&runs))
	s := server(t, e)

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
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if u := c.Request().Header.Get("X-User"); u != "" {
				c.Set("principal", principal{Subject: u})
			}
			return next(c)
		}
	}, newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.Subject = echoidem.SubjectFrom(func(c echo.Context) string {
			p, _ := c.Get("principal").(principal)
			return p.Subject
		})
	}))
	e.POST("/tasks", counted(&runs))
	s := server(t, e)

	require.Equal(t, http.StatusCreated, send(t, s, http.MethodPost, "/tasks", "carol", uuid.NewString(), `{}`).status)
	recs := records(t, st)
	require.Len(t, recs, 1)
	require.Equal(t, idempotency.SubjectUUID("carol"), recs[0].UserID)
}

// TestEchoChain checks that the handlers after the middleware keep Echo's
// response and chain: headers set late, c.JSON, returned errors, the status
// and error an outer middleware sees, and a replay or refusal that skips
// the handlers.
func TestEchoChain(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	var seen atomic.Value // what the outer middleware sees
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			err := next(c)
			seen.Store(fmt.Sprintf("%d %d %v", c.Response().Status, c.Response().Size, err))
			return err
		}
	}, authenticate, newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.ReplayHeaders = []string{"X-Later"}
	}))
	e.POST("/tasks", func(c echo.Context) error {
		info, ok := idempotency.FromContext(c.Request().Context())
		require.True(t, ok, "the run's Info is in the request's context")
		c.Response().Header().Set("X-Later", "set by the handler")
		c.Response().Header().Set("X-Not-Kept", "1")
		return c.JSON(http.StatusCreated, map[string]any{"run": runs.Add(1), "key": info.Key})
	})
	e.POST("/missing", func(echo.Context) error {
		runs.Add(1)
		return echo.NewHTTPError(http.StatusNotFound, "no such thing")
	})
	e.GET("/tasks", func(c echo.Context) error { return c.String(http.StatusOK, "list") })
	s := server(t, e)

	key := uuid.NewString()
	first := send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"a"}`)
	require.Equal(t, http.StatusCreated, first.status)
	require.JSONEq(t, `{"run":1,"key":"`+key+`"}`, first.body)
	require.Equal(t, "set by the handler", first.header.Get("X-Later"))
	require.Equal(t, "1", first.header.Get("X-Not-Kept"))
	require.Equal(t, echo.MIMEApplicationJSON, first.header.Get("Content-Type"))
	require.Equal(t, fmt.Sprintf("201 %d <nil>", len(first.body)), seen.Load(), "the outer middleware sees the answer on Echo's response")

	replay := send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"a"}`)
	require.Equal(t, first.body, replay.body)
	require.Equal(t, "true", replay.header.Get(idempotency.ReplayedHeader))
	require.Equal(t, "set by the handler", replay.header.Get("X-Later"), "a listed header is replayed")
	require.Empty(t, replay.header.Get("X-Not-Kept"))
	require.Equal(t, first.header.Get("Content-Type"), replay.header.Get("Content-Type"))
	require.Equal(t, fmt.Sprintf("201 %d <nil>", len(first.body)), seen.Load())
	require.EqualValues(t, 1, runs.Load(), "a replay skips the handler")

	requireProblem(t, send(t, s, http.MethodPost, "/tasks", "alice", key, `{"title":"b"}`), http.StatusUnprocessableEntity, idempotency.CodeKeyReused)
	require.Regexp(t, `^422 \d+ <nil>$`, seen.Load())

	missing := uuid.NewString()
	notFound := send(t, s, http.MethodPost, "/missing", "alice", missing, `{}`)
	require.Equal(t, http.StatusNotFound, notFound.status)
	require.JSONEq(t, `{"message":"no such thing"}`, notFound.body, "the error's answer, written by Echo's error handler")
	require.Regexp(t, `^404 \d+ code=404, message=no such thing$`, seen.Load(), "the error goes on to the outer middleware")
	again := send(t, s, http.MethodPost, "/missing", "alice", missing, `{}`)
	require.Equal(t, http.StatusNotFound, again.status)
	require.Equal(t, notFound.body, again.body)
	require.Equal(t, "true", again.header.Get(idempotency.ReplayedHeader), "an error's 4xx answer is kept like any 4xx")
	require.EqualValues(t, 2, runs.Load())

	before := len(records(t, st))
	list := send(t, s, http.MethodGet, "/tasks", "", "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Equal(t, "list", list.body)
	require.Regexp(t, `^200 4 <nil>$`, seen.Load())
	require.Len(t, records(t, st), before, "a GET passes through without touching the store")
}

// TestErrorReleases checks that a handler's error answered with a 5xx
// releases the key, so that the retry runs.
func TestErrorReleases(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	e := echo.New()
	e.Use(authenticate, newMiddleware(t, st))
	e.POST("/tasks", func(c echo.Context) error {
		if runs.Add(1) == 1 {
			return errors.New("the database is down")
		}
		return c.JSON(http.StatusCreated, map[string]int32{"run": runs.Load()})
	})
	s := server(t, e)

	key := uuid.NewString()
	failed := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, http.StatusInternalServerError, failed.status)
	require.JSONEq(t, `{"message":"Internal Server Error"}`, failed.body)
	require.Empty(t, records(t, st), "the key was released")

	retry := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, http.StatusCreated, retry.status)
	require.JSONEq(t, `{"run":2}`, retry.body)
}

// TestPanicRecovered checks that a panic releases the key and reaches
// Echo's Recover, which answers on the real response, and that the retry
// runs.
func TestPanicRecovered(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	var runs atomic.Int32
	e := echo.New()
	e.Use(middleware.RecoverWithConfig(middleware.RecoverConfig{DisablePrintStack: true}), authenticate, newMiddleware(t, st))
	e.POST("/tasks", func(c echo.Context) error {
		if runs.Add(1) == 1 {
			c.Response().Header().Set("X-Half", "written before the panic")
			panic("the first run fails")
		}
		return c.JSON(http.StatusCreated, map[string]int32{"run": runs.Load()})
	})
	s := server(t, e)

	key := uuid.NewString()
	failed := send(t, s, http.MethodPost, "/tasks", "alice", key, `{}`)
	require.Equal(t, http.StatusInternalServerError, failed.status)
	require.JSONEq(t, `{"message":"Internal Server Error"}`, failed.body)
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
	e := echo.New()
	e.Use(authenticate)
	e.POST("/operations/:operation", counted(&runs), newMiddleware(t, st, func(cfg *idempotency.Config) {
		cfg.Key = echoidem.ParamKey("operation")
		cfg.KeyFormat = idempotency.KeyOpaque
	}))
	s := server(t, e)

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
	_, err := echoidem.Middleware(idempotency.Config{Store: memstore.New()})
	require.ErrorContains(t, err, "Config.Subject")
}
