package localapi_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/testkit/capture"
)

const userID = "6f1b0d6e-3c0a-4a53-9d0e-3f7c8f3b2a11"

var taskRoutes = []localapi.Route{
	{Method: "POST", Path: "/tasks", Function: "CreateTaskFunction"},
	{Method: "GET", Path: "/tasks", Function: "ListTasksFunction"},
	{Method: "GET", Path: "/tasks/{id}", Function: "GetTaskFunction"},
	{Method: "PATCH", Path: "/tasks/{id}", Function: "UpdateTaskFunction"},
	{Method: "DELETE", Path: "/tasks/{id}", Function: "DeleteTaskFunction"},
}

// fake is a handler that records the events it gets and answers with a
// fixed response.
type fake struct {
	mu     sync.Mutex
	events []events.APIGatewayV2HTTPRequest
	ctxs   []context.Context
	resp   events.APIGatewayV2HTTPResponse
	err    error
	panic  bool
}

func (f *fake) handle(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	f.mu.Lock()
	f.events = append(f.events, ev)
	f.ctxs = append(f.ctxs, ctx)
	f.mu.Unlock()
	if f.panic {
		panic("boom")
	}
	return f.resp, f.err
}

func (f *fake) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.events)
}

func (f *fake) last(t *testing.T) events.APIGatewayV2HTTPRequest {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	require.NotEmpty(t, f.events, "the function was not called")
	return f.events[len(f.events)-1]
}

// serve starts the gateway over real HTTP with one fake behind every
// route, and returns the server and the fake.
func serve(t *testing.T, routes []localapi.Route, f *fake, accessLog io.Writer) *httptest.Server {
	t.Helper()
	handlers := map[string]localapi.Handler{}
	for _, r := range routes {
		handlers[r.Function] = f.handle
	}
	gw, err := localapi.New(localapi.Config{Routes: routes, Handlers: handlers, AccessLog: accessLog, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	return srv
}

func token(t *testing.T, sub string) string {
	t.Helper()
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: sub})
	require.NoError(t, err)
	return tok
}

func ok() events.APIGatewayV2HTTPResponse {
	return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{}`}
}

func do(t *testing.T, req *http.Request) (*http.Response, string) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, string(b)
}

func TestEventFromRequest(t *testing.T) {
	t.Parallel()
	f := &fake{resp: ok()}
	srv := serve(t, taskRoutes, f, nil)
	bearer := "Bearer " + token(t, userID)

	type request struct {
		method, target string
		headers        [][2]string
		body           []byte
	}
	cases := []struct {
		name  string
		req   request
		check func(t *testing.T, ev events.APIGatewayV2HTTPRequest)
	}{
		{
			name: "headers lower-cased, repeated ones comma-joined",
			req: request{method: "GET", target: "/tasks", headers: [][2]string{
				{"X-Multi", "a"}, {"X-Multi", "b"}, {"X-Single", "Value, with comma"}, {"Idempotency-Key", "k"},
			}},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, "a,b", ev.Headers["x-multi"])
				require.Equal(t, "Value, with comma", ev.Headers["x-single"])
				require.Equal(t, "k", ev.Headers["idempotency-key"])
				require.Equal(t, bearer, ev.Headers["authorization"])
				require.Equal(t, strings.TrimPrefix(srv.URL, "http://"), ev.Headers["host"])
				require.Equal(t, "127.0.0.1", ev.Headers["x-forwarded-for"])
				require.Equal(t, "http", ev.Headers["x-forwarded-proto"])
				require.Contains(t, ev.Headers["x-amzn-trace-id"], "Root=1-")
				for name := range ev.Headers {
					require.Equal(t, strings.ToLower(name), name)
				}
			},
		},
		{
			name: "cookies split out of the Cookie header",
			req: request{method: "GET", target: "/tasks", headers: [][2]string{
				{"Cookie", "a=1; b=2"}, {"Cookie", "c=3"},
			}},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, []string{"a=1", "b=2", "c=3"}, ev.Cookies)
				require.NotContains(t, ev.Headers, "cookie")
			},
		},
		{
			name: "raw query string and comma-joined parameters",
			req:  request{method: "GET", target: "/tasks?limit=5&tag=a&tag=b%20c&empty=&cursor=x%2By"},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, "limit=5&tag=a&tag=b%20c&empty=&cursor=x%2By", ev.RawQueryString)
				require.Equal(t, map[string]string{"limit": "5", "tag": "a,b c", "empty": "", "cursor": "x+y"}, ev.QueryStringParameters)
				require.Nil(t, ev.Cookies)
			},
		},
		{
			name: "no query: no parameters",
			req:  request{method: "GET", target: "/tasks"},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Empty(t, ev.RawQueryString)
				require.Nil(t, ev.QueryStringParameters)
				require.Nil(t, ev.PathParameters)
				require.Equal(t, "GET /tasks", ev.RouteKey)
			},
		},
		{
			name: "path parameters, decoded; rawPath as sent",
			req:  request{method: "GET", target: "/tasks/a%20b"},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, map[string]string{"id": "a b"}, ev.PathParameters)
				require.Equal(t, "/tasks/a%20b", ev.RawPath)
				require.Equal(t, "GET /tasks/{id}", ev.RouteKey)
				require.Equal(t, "GET /tasks/{id}", ev.RequestContext.RouteKey)
			},
		},
		{
			name: "JSON body as text",
			req:  request{method: "POST", target: "/tasks", headers: [][2]string{{"Content-Type", "application/json; charset=utf-8"}}, body: []byte(`{"title":"a"}`)},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, `{"title":"a"}`, ev.Body)
				require.False(t, ev.IsBase64Encoded)
				require.Equal(t, "13", ev.Headers["content-length"])
			},
		},
		{
			name: "text/plain body as text",
			req:  request{method: "POST", target: "/tasks", headers: [][2]string{{"Content-Type", "text/plain"}}, body: []byte("héllo")},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Equal(t, "héllo", ev.Body)
				require.False(t, ev.IsBase64Encoded)
			},
		},
		{
			name: "binary body base64-encoded",
			req:  request{method: "POST", target: "/tasks", headers: [][2]string{{"Content-Type", "application/octet-stream"}}, body: []byte{0, 1, 2, 0xff}},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.True(t, ev.IsBase64Encoded)
				require.Equal(t, base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}), ev.Body)
			},
		},
		{
			name: "form data base64-encoded, as an HTTP API does",
			req:  request{method: "POST", target: "/tasks", headers: [][2]string{{"Content-Type", "application/x-www-form-urlencoded"}}, body: []byte("a=1")},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.True(t, ev.IsBase64Encoded)
				require.Equal(t, "YT0x", ev.Body)
			},
		},
		{
			name: "no content type: base64-encoded",
			req:  request{method: "POST", target: "/tasks", body: []byte(`{"title":"a"}`)},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.True(t, ev.IsBase64Encoded)
				require.Equal(t, base64.StdEncoding.EncodeToString([]byte(`{"title":"a"}`)), ev.Body)
			},
		},
		{
			name: "empty body",
			req:  request{method: "DELETE", target: "/tasks/1", headers: [][2]string{{"Content-Type", "application/octet-stream"}}},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				require.Empty(t, ev.Body)
				require.False(t, ev.IsBase64Encoded)
				require.NotContains(t, ev.Headers, "content-length")
			},
		},
		{
			name: "request context",
			req:  request{method: "PATCH", target: "/tasks/42?x=1", headers: [][2]string{{"User-Agent", "tester/1.0"}}},
			check: func(t *testing.T, ev events.APIGatewayV2HTTPRequest) {
				rc := ev.RequestContext
				require.Equal(t, "2.0", ev.Version)
				require.Equal(t, "PATCH /tasks/{id}", rc.RouteKey)
				require.Equal(t, "$default", rc.Stage)
				require.Len(t, rc.RequestID, 16)
				require.Equal(t, "PATCH", rc.HTTP.Method)
				require.Equal(t, "/tasks/42", rc.HTTP.Path)
				require.Equal(t, "HTTP/1.1", rc.HTTP.Protocol)
				require.Equal(t, "127.0.0.1", rc.HTTP.SourceIP)
				require.Equal(t, "tester/1.0", rc.HTTP.UserAgent)
				require.Equal(t, "127.0.0.1", rc.DomainName)
				parsed, err := time.Parse("02/Jan/2006:15:04:05 -0700", rc.Time)
				require.NoError(t, err)
				require.WithinDuration(t, time.Now(), parsed, time.Minute)
				require.InDelta(t, time.Now().UnixMilli(), rc.TimeEpoch, float64(time.Minute.Milliseconds()))
				require.Equal(t, parsed.Unix(), rc.TimeEpoch/1000)
				require.NotNil(t, rc.Authorizer)
				require.NotNil(t, rc.Authorizer.JWT)
				require.Equal(t, userID, rc.Authorizer.JWT.Claims["sub"])
				require.Equal(t, "access", rc.Authorizer.JWT.Claims["token_use"])
				require.Equal(t, []string{"aws.cognito.signin.user.admin"}, rc.Authorizer.JWT.Scopes)
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, err := http.NewRequest(tc.req.method, srv.URL+tc.req.target, bytes.NewReader(tc.req.body))
			require.NoError(t, err)
			req.Header.Set("Authorization", bearer)
			for _, h := range tc.req.headers {
				req.Header.Add(h[0], h[1])
			}
			resp, _ := do(t, req)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			ev := f.findByRequestID(t, resp.Header.Get("Apigw-Requestid"))
			tc.check(t, ev)
		})
	}
}

func (f *fake) findByRequestID(t *testing.T, id string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	require.NotEmpty(t, id, "no apigw-requestid header")
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, ev := range f.events {
		if ev.RequestContext.RequestID == id {
			return ev
		}
	}
	t.Fatalf("no event with request id %q", id)
	return events.APIGatewayV2HTTPRequest{}
}

func TestFunctionContext(t *testing.T) {
	t.Parallel()
	f := &fake{resp: ok()}
	srv := serve(t, taskRoutes, f, nil)
	req, _ := http.NewRequest("GET", srv.URL+"/tasks", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, userID))
	resp, _ := do(t, req)
	require.Equal(t, 200, resp.StatusCode)

	f.mu.Lock()
	ctx := f.ctxs[0]
	f.mu.Unlock()
	deadline, ok := ctx.Deadline()
	require.True(t, ok, "a function's context has its timeout as deadline")
	require.WithinDuration(t, time.Now().Add(30*time.Second), deadline, 5*time.Second)
	lc, ok := lambdacontext.FromContext(ctx)
	require.True(t, ok, "a function's context carries a Lambda context")
	require.NotEmpty(t, lc.AwsRequestID)
	require.Contains(t, lc.InvokedFunctionArn, ":function:ListTasksFunction")
}

func TestJWTAuthorizer(t *testing.T) {
	t.Parallel()
	f := &fake{resp: ok()}
	srv := serve(t, taskRoutes, f, nil)
	now := time.Now()
	valid := token(t, userID)
	expired, err := localapi.NewToken(localapi.TokenOptions{Subject: userID, Now: now.Add(-2 * time.Hour), TTL: time.Hour})
	require.NoError(t, err)
	b64 := base64.RawURLEncoding.EncodeToString
	notYet := b64([]byte(`{"alg":"none"}`)) + "." + b64([]byte(`{"sub":"x","nbf":`+strconv.FormatInt(now.Add(time.Hour).Unix(), 10)+`}`)) + "."
	unsigned := b64([]byte(`{"alg":"none"}`)) + "." + b64([]byte(`{"sub":"`+userID+`"}`)) + "."

	cases := []struct {
		name          string
		authorization []string
		status        int
		wwwAuth       string
	}{
		{name: "no header", status: 401},
		{name: "empty header", authorization: []string{""}, status: 401},
		{name: "Bearer without a token", authorization: []string{"Bearer"}, status: 401, wwwAuth: "malformed"},
		{name: "Bearer and spaces", authorization: []string{"Bearer    "}, status: 401, wwwAuth: "malformed"},
		{name: "not a JWT", authorization: []string{"Bearer abc"}, status: 401, wwwAuth: "malformed"},
		{name: "three parts of junk", authorization: []string{"Bearer a.b.c"}, status: 401, wwwAuth: "malformed"},
		{name: "claims not JSON", authorization: []string{"Bearer " + b64([]byte(`{"alg":"none"}`)) + "." + b64([]byte("nope")) + "."}, status: 401, wwwAuth: "malformed"},
		{name: "header without alg", authorization: []string{"Bearer " + b64([]byte(`{}`)) + "." + b64([]byte(`{"sub":"x"}`)) + "."}, status: 401, wwwAuth: "malformed"},
		{name: "basic auth", authorization: []string{"Basic dXNlcjpwYXNz"}, status: 401, wwwAuth: "malformed"},
		{name: "two tokens", authorization: []string{"Bearer " + valid, "Bearer " + valid}, status: 401, wwwAuth: "malformed"},
		{name: "expired", authorization: []string{"Bearer " + expired}, status: 401, wwwAuth: "the token has expired"},
		{name: "not yet valid", authorization: []string{"Bearer " + notYet}, status: 401, wwwAuth: "not valid yet"},
		{name: "valid", authorization: []string{"Bearer " + valid}, status: 200},
		{name: "valid, lower-case scheme", authorization: []string{"bearer " + valid}, status: 200},
		{name: "valid, bare token", authorization: []string{valid}, status: 200},
		{name: "unsigned token", authorization: []string{"Bearer " + unsigned}, status: 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest("POST", srv.URL+"/tasks", strings.NewReader(`{"title":"x"}`))
			req.Header.Set("Content-Type", "application/json")
			for _, a := range tc.authorization {
				req.Header.Add("Authorization", a)
			}
			resp, body := do(t, req)
			require.Equal(t, tc.status, resp.StatusCode)
			if tc.status == 401 {
				require.Equal(t, `{"message":"Unauthorized"}`, body)
				require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
				require.NotEmpty(t, resp.Header.Get("Apigw-Requestid"))
				if tc.wwwAuth != "" {
					require.Contains(t, resp.Header.Get("Www-Authenticate"), `error="invalid_token"`)
					require.Contains(t, resp.Header.Get("Www-Authenticate"), tc.wwwAuth)
				}
			}
		})
	}
	// Every refused request was refused before the function ran: only
	// the valid ones reached it.
	require.Equal(t, 4, f.calls())
}

func TestAuthorizeClaims(t *testing.T) {
	t.Parallel()
	b64 := base64.RawURLEncoding.EncodeToString
	claims := `{"sub":"u","exp":4102444800,"ratio":1.5,"email_verified":true,"cognito:groups":["admin","users"],"address":{"city":"Kyoto"},"scope":"read write"}`
	id, err := localapi.Authorize("Bearer "+b64([]byte(`{"alg":"RS256","kid":"k"}`))+"."+b64([]byte(claims))+".c2ln", time.Now())
	require.NoError(t, err)
	require.Equal(t, map[string]string{
		"sub":            "u",
		"exp":            "4102444800",
		"ratio":          "1.5",
		"email_verified": "true",
		"cognito:groups": "[admin users]",
		"address":        `{"city":"Kyoto"}`,
		"scope":          "read write",
	}, id.Claims)
	require.Equal(t, []string{"read", "write"}, id.Scopes)

	_, err = localapi.Authorize("", time.Now())
	require.ErrorIs(t, err, localapi.ErrNoToken)
	_, err = localapi.Authorize("Bearer x", time.Now())
	require.ErrorIs(t, err, localapi.ErrMalformedToken)
}

func TestNewToken(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: userID, Now: now, TTL: time.Hour})
	require.NoError(t, err)
	require.Len(t, strings.Split(tok, "."), 3)

	id, err := localapi.Authorize("Bearer "+tok, now.Add(time.Minute))
	require.NoError(t, err)
	require.Equal(t, userID, id.Claims["sub"])
	require.Equal(t, localapi.LocalIssuer, id.Claims["iss"])
	require.Equal(t, localapi.LocalClientID, id.Claims["client_id"])
	require.Equal(t, "access", id.Claims["token_use"])
	require.Equal(t, "1700003600", id.Claims["exp"])
	require.Equal(t, "1700000000", id.Claims["iat"])
	require.Equal(t, userID, id.Claims["username"])
	require.NotEmpty(t, id.Claims["jti"])

	_, err = localapi.Authorize("Bearer "+tok, now.Add(time.Hour))
	require.ErrorIs(t, err, localapi.ErrTokenExpired)

	_, err = localapi.NewToken(localapi.TokenOptions{})
	require.Error(t, err)
}

func TestResponseMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		resp   events.APIGatewayV2HTTPResponse
		err    error
		panic  bool
		status int
		body   string
		check  func(t *testing.T, h http.Header)
	}{
		{
			name: "status, headers and body",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{
				"Content-Type": "application/json", "location": "/tasks/1", "Idempotent-Replayed": "true",
			}, Body: `{"id":"1"}`},
			status: 201, body: `{"id":"1"}`,
			check: func(t *testing.T, h http.Header) {
				require.Equal(t, "application/json", h.Get("Content-Type"))
				require.Equal(t, "/tasks/1", h.Get("Location"))
				require.Equal(t, "true", h.Get("Idempotent-Replayed"))
			},
		},
		{
			name: "multi-value headers",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"X-One": "1"},
				MultiValueHeaders: map[string][]string{"x-many": {"a", "b"}}, Body: "ok"},
			status: 200, body: "ok",
			check: func(t *testing.T, h http.Header) {
				require.Equal(t, "1", h.Get("X-One"))
				require.Equal(t, []string{"a", "b"}, h.Values("X-Many"))
			},
		},
		{
			name:   "cookies become Set-Cookie headers",
			resp:   events.APIGatewayV2HTTPResponse{StatusCode: 200, Cookies: []string{"a=1; Path=/", "b=2; HttpOnly"}},
			status: 200, body: "",
			check: func(t *testing.T, h http.Header) {
				require.Equal(t, []string{"a=1; Path=/", "b=2; HttpOnly"}, h.Values("Set-Cookie"))
			},
		},
		{
			name: "base64 body decoded",
			resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "image/png"},
				Body: base64.StdEncoding.EncodeToString([]byte{0x89, 'P', 'N', 'G', 0}), IsBase64Encoded: true},
			status: 200, body: string([]byte{0x89, 'P', 'N', 'G', 0}),
			check: func(t *testing.T, h http.Header) { require.Equal(t, "image/png", h.Get("Content-Type")) },
		},
		{
			name: "204 without a body", resp: events.APIGatewayV2HTTPResponse{StatusCode: 204},
			status: 204, body: "",
		},
		{
			name: "no content type given, none invented", resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "<html></html>"},
			status: 200, body: "<html></html>",
			check: func(t *testing.T, h http.Header) { require.Empty(t, h.Get("Content-Type")) },
		},
		{
			name: "problem+json passes through", resp: events.APIGatewayV2HTTPResponse{StatusCode: 400,
				Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: `{"code":"idempotency_key_missing"}`},
			status: 400, body: `{"code":"idempotency_key_missing"}`,
			check: func(t *testing.T, h http.Header) { require.Equal(t, "application/problem+json", h.Get("Content-Type")) },
		},
		{name: "function error", err: errors.New("db down: secret details"), status: 500, body: `{"message":"Internal Server Error"}`},
		{name: "function panic", panic: true, status: 500, body: `{"message":"Internal Server Error"}`},
		{name: "no status code", resp: events.APIGatewayV2HTTPResponse{Body: "x"}, status: 500, body: `{"message":"Internal Server Error"}`},
		{name: "bad base64", resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: "%%%", IsBase64Encoded: true}, status: 500, body: `{"message":"Internal Server Error"}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := &fake{resp: tc.resp, err: tc.err, panic: tc.panic}
			srv := serve(t, taskRoutes, f, nil)
			req, _ := http.NewRequest("GET", srv.URL+"/tasks/1", nil)
			req.Header.Set("Authorization", "Bearer "+token(t, userID))
			resp, body := do(t, req)
			require.Equal(t, tc.status, resp.StatusCode)
			require.Equal(t, tc.body, body)
			require.NotEmpty(t, resp.Header.Get("Apigw-Requestid"))
			require.Equal(t, 1, f.calls())
			if tc.check != nil {
				tc.check(t, resp.Header)
			}
		})
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	routes := []localapi.Route{
		{Method: "GET", Path: "/tasks/{id}", Function: "Get"},
		{Method: "GET", Path: "/tasks/mine", Function: "Mine"},
		{Method: "ANY", Path: "/files/{path+}", Function: "Files"},
		{Method: "GET", Path: "/files/{path+}", Function: "GetFiles"},
		{Method: "GET", Path: "/", Function: "Root"},
	}
	byFn := map[string]*fake{}
	handlers := map[string]localapi.Handler{}
	for _, r := range routes {
		f := &fake{resp: events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: r.Function}}
		byFn[r.Function] = f
		handlers[r.Function] = f.handle
	}
	gw, err := localapi.New(localapi.Config{Routes: routes, Handlers: handlers})
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	bearer := "Bearer " + token(t, userID)

	cases := []struct {
		method, target string
		auth           bool
		status         int
		body           string
		params         map[string]string
	}{
		{"GET", "/tasks/42", true, 200, "Get", map[string]string{"id": "42"}},
		{"GET", "/tasks/mine", true, 200, "Mine", nil},
		{"GET", "/files/a/b/c.txt", true, 200, "GetFiles", map[string]string{"path": "a/b/c.txt"}},
		{"PUT", "/files/a/b", true, 200, "Files", map[string]string{"path": "a/b"}},
		{"GET", "/", true, 200, "Root", nil},
		{"GET", "/nope", true, 404, `{"message":"Not Found"}`, nil},
		{"GET", "/tasks/42/extra", true, 404, `{"message":"Not Found"}`, nil},
		{"GET", "/tasks/", true, 404, `{"message":"Not Found"}`, nil},
		{"DELETE", "/tasks/42", true, 404, `{"message":"Not Found"}`, nil},
		// No route is decided before the authorizer: an unknown route
		// without a token is still a 404.
		{"GET", "/nope", false, 404, `{"message":"Not Found"}`, nil},
		{"GET", "/tasks/42", false, 401, `{"message":"Unauthorized"}`, nil},
	}
	for _, tc := range cases {
		req, _ := http.NewRequest(tc.method, srv.URL+tc.target, nil)
		if tc.auth {
			req.Header.Set("Authorization", bearer)
		}
		resp, body := do(t, req)
		require.Equal(t, tc.status, resp.StatusCode, "%s %s", tc.method, tc.target)
		require.Equal(t, tc.body, body, "%s %s", tc.method, tc.target)
		if tc.status == 200 {
			ev := byFn[tc.body].last(t)
			require.Equal(t, tc.params, ev.PathParameters, "%s %s", tc.method, tc.target)
		} else {
			require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		}
	}
	require.Equal(t, 1, byFn["Get"].calls(), "no refused request reached a function")
}

func TestDefaultRoute(t *testing.T) {
	t.Parallel()
	f := &fake{resp: ok()}
	srv := serve(t, []localapi.Route{
		{Method: "GET", Path: "/tasks", Function: "List"},
		{Path: "$default", Function: "Default"},
	}, f, nil)
	req, _ := http.NewRequest("DELETE", srv.URL+"/anything/at/all", nil)
	req.Header.Set("Authorization", "Bearer "+token(t, userID))
	resp, _ := do(t, req)
	require.Equal(t, 200, resp.StatusCode)
	require.Equal(t, "$default", f.last(t).RouteKey)
}

func TestNewRefusesBadConfig(t *testing.T) {
	t.Parallel()
	f := &fake{}
	_, err := localapi.New(localapi.Config{Routes: taskRoutes, Handlers: map[string]localapi.Handler{"CreateTaskFunction": f.handle}})
	require.ErrorIs(t, err, localapi.ErrNoHandler)
	require.ErrorContains(t, err, "ListTasksFunction")

	var routeErr *localapi.RouteError
	for _, bad := range []localapi.Route{
		{Method: "GET", Path: "tasks", Function: "X"},
		{Method: "GET", Path: "/a/{rest+}/b", Function: "X"},
		{Method: "GET", Path: "/a/x{id}", Function: "X"},
		{Method: "", Path: "/a", Function: "X"},
	} {
		_, err := localapi.New(localapi.Config{Routes: []localapi.Route{bad}, Handlers: map[string]localapi.Handler{"X": f.handle}})
		require.ErrorAs(t, err, &routeErr, "%+v", bad)
	}
	_, err = localapi.New(localapi.Config{Routes: []localapi.Route{taskRoutes[0], taskRoutes[0]}, Handlers: map[string]localapi.Handler{"CreateTaskFunction": f.handle}})
	require.ErrorAs(t, err, &routeErr)
	_, err = localapi.New(localapi.Config{})
	require.Error(t, err)
}

func TestBodyLimit(t *testing.T) {
	t.Parallel()
	f := &fake{resp: ok()}
	gw, err := localapi.New(localapi.Config{Routes: taskRoutes[:1], Handlers: map[string]localapi.Handler{"CreateTaskFunction": f.handle}, MaxBodyBytes: 10})
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		body   string
		status int
	}{{"0123456789", 200}, {"0123456789a", 413}} {
		req, _ := http.NewRequest("POST", srv.URL+"/tasks", strings.NewReader(tc.body))
		req.Header.Set("Authorization", "Bearer "+token(t, userID))
		req.Header.Set("Content-Type", "text/plain")
		resp, body := do(t, req)
		require.Equal(t, tc.status, resp.StatusCode)
		if tc.status == 413 {
			require.Equal(t, `{"message":"Request Entity Too Large"}`, body)
		}
	}
	require.Equal(t, 1, f.calls())
}

func TestAccessLog(t *testing.T) {
	t.Parallel()
	var buf capture.Buffer
	f := &fake{resp: events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"id":"1"}`}}
	srv := serve(t, taskRoutes, f, &buf)

	req, _ := http.NewRequest("POST", srv.URL+"/tasks?x=1", strings.NewReader(`{}`))
	req.Header.Set("Authorization", "Bearer "+token(t, userID))
	req.Header.Set("Content-Type", "application/json")
	resp, _ := do(t, req)
	require.Equal(t, 201, resp.StatusCode)
	req, _ = http.NewRequest("GET", srv.URL+"/tasks", nil)
	resp401, _ := do(t, req)
	require.Equal(t, 401, resp401.StatusCode)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 2, "one line per request")
	require.Regexp(t, `^127\.0\.0\.1 - - \[\d\d/\w{3}/\d{4}:\d\d:\d\d:\d\d \+0000\] "POST /tasks\?x=1 HTTP/1\.1" 201 10 `+
		regexp.QuoteMeta(resp.Header.Get("Apigw-Requestid"))+` CreateTaskFunction \S+$`, lines[0])
	require.Regexp(t, `"GET /tasks HTTP/1\.1" 401 26 \S+ - \S+$`, lines[1])
}

func TestCheckLoopback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		addr string
		ok   bool
	}{
		{"127.0.0.1:3000", true},
		{"127.0.0.2:3000", true},
		{"[::1]:3000", true},
		{"localhost:3000", true},
		{"127.0.0.1:0", true},
		{":3000", false},
		{"0.0.0.0:3000", false},
		{"[::]:3000", false},
		{"192.168.1.10:3000", false},
		{"example.com:3000", false},
		{"127.0.0.1", false},
	} {
		err := localapi.CheckLoopback(tc.addr)
		if tc.ok {
			require.NoError(t, err, tc.addr)
		} else {
			require.Error(t, err, tc.addr)
		}
	}
	require.ErrorIs(t, localapi.CheckLoopback("0.0.0.0:3000"), localapi.ErrNotLoopback)

	_, err := localapi.Listen(context.Background(), "0.0.0.0:0")
	require.ErrorIs(t, err, localapi.ErrNotLoopback)
	ln, err := localapi.Listen(context.Background(), "localhost:0")
	require.NoError(t, err)
	defer ln.Close()
	require.Contains(t, ln.Addr().String(), "127.0.0.1:")
}

func TestListenAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := localapi.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = localapi.Listen(context.Background(), ln.Addr().String())
	require.ErrorIs(t, err, localapi.ErrAddrInUse)
	require.ErrorIs(t, err, syscall.EADDRINUSE)
	require.ErrorContains(t, err, ln.Addr().String())
}
