package tasks_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

const (
	alice = "0b6a3a4e-0f38-4f2f-8a59-1a3f3c1b2a01"
	bob   = "7d1f3c2b-55aa-4c1e-9b0e-2f6d8e4a9c02"
)

// env is one test's database and the API over it.
type env struct {
	db  *pgtest.DB
	api *tasks.API
}

func newEnv(t *testing.T) *env {
	t.Helper()
	db := apptest.New(t)
	e := &env{db: db}
	e.api = tasks.NewAPI(tasks.NewService(db.Pool), &tasks.Options{Logger: e.quietLogger()})
	return e
}

// quietLogger discards what the API logs: the failures tests provoke.
func (e *env) quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// closedPool returns a pool on url that is already closed: every query on
// it fails as a database that cannot be reached would.
func closedPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	pool.Close()
	return pool
}

// request builds the HTTP API (v2) event API Gateway would send for method
// and target (path and query) on behalf of user ("" for none).
func request(user, method, target, body string) events.APIGatewayV2HTTPRequest {
	path, rawQuery, _ := strings.Cut(target, "?")
	req := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RawPath:        path,
		RawQueryString: rawQuery,
		Headers:        map[string]string{"content-type": "application/json"},
		Body:           body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RequestID: "req-" + method,
			HTTP:      events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
		},
	}
	if id, ok := strings.CutPrefix(path, "/tasks/"); ok {
		req.RouteKey = method + " /tasks/{id}"
		req.PathParameters = map[string]string{"id": id}
	} else {
		req.RouteKey = method + " /tasks"
	}
	req.RequestContext.RouteKey = req.RouteKey
	if rawQuery != "" {
		q, err := url.ParseQuery(rawQuery)
		if err != nil {
			panic(err)
		}
		req.QueryStringParameters = map[string]string{}
		for k, vs := range q { // an HTTP API joins repeated parameters with commas
			req.QueryStringParameters[k] = strings.Join(vs, ",")
		}
	}
	if user != "" {
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: map[string]string{"sub": user, "iss": "https://cognito-idp.example"},
			},
		}
	}
	return req
}

// handler returns the API's handler for a method and target.
func (e *env) handler(method, target string) tasks.Handler {
	path, _, _ := strings.Cut(target, "?")
	switch {
	case method == "POST":
		return e.api.Create
	case method == "GET" && path == "/tasks":
		return e.api.List
	case method == "GET":
		return e.api.Get
	case method == "PATCH":
		return e.api.Update
	case method == "DELETE":
		return e.api.Delete
	}
	panic("no route for " + method + " " + target)
}

// do sends a request and checks that the handler answered without a Go
// error, as every handler of the API must.
func (e *env) do(t *testing.T, user, method, target, body string) events.APIGatewayV2HTTPResponse {
	t.Helper()
	resp, err := e.handler(method, target)(context.Background(), request(user, method, target, body))
	require.NoError(t, err, "a handler never returns a Go error")
	return resp
}

func (e *env) create(t *testing.T, user, body string) tasks.Task {
	t.Helper()
	resp := e.do(t, user, "POST", "/tasks", body)
	require.Equal(t, 201, resp.StatusCode, resp.Body)
	return decodeTask(t, resp)
}

func decodeTask(t *testing.T, resp events.APIGatewayV2HTTPResponse) tasks.Task {
	t.Helper()
	require.Equal(t, "application/json", resp.Headers["Content-Type"])
	var task tasks.Task
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &task), resp.Body)
	return task
}

// requireProblem checks a problem+json response, its code and, for a
// validation failure, exactly the fields it names.
func requireProblem(t *testing.T, resp events.APIGatewayV2HTTPResponse, status int, code string, fields ...string) problem.Details {
	t.Helper()
	require.Equal(t, status, resp.StatusCode, resp.Body)
	require.Equal(t, problem.ContentType, resp.Headers["Content-Type"])
	var d problem.Details
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &d))
	require.Equal(t, code, d.Code)
	require.Equal(t, status, d.Status)
	require.NotEmpty(t, d.Type)
	require.NotEmpty(t, d.Title)
	var got []string
	for _, f := range d.Errors {
		require.NotEmpty(t, f.Detail, "field %s has no detail", f.Field)
		got = append(got, f.Field)
	}
	require.ElementsMatch(t, fields, got, resp.Body)
	return d
}

// taskCount counts the rows of tasks in the test's schema.
func (e *env) taskCount(t *testing.T) int {
	t.Helper()
	var n int
	require.NoError(t, e.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks`).Scan(&n))
	return n
}

func ptr[T any](v T) *T { return &v }

func isRFC3339(t *testing.T, s string) {
	t.Helper()
	_, err := time.Parse(time.RFC3339Nano, s)
	require.NoError(t, err, "%q is not RFC 3339", s)
}
