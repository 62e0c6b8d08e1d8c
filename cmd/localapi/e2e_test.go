package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/testkit/capture"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// server is the command running in the test, on a free loopback port.
type server struct {
	base      string
	db        *pgtest.DB // the schema the server uses
	accessLog *capture.Buffer
	stdout    *capture.Buffer
	stop      func() error
}

// startServer runs the command as `make run` does, with DATABASE_URL set
// to a schema of the test's own and the extra NAME=value variables, and
// waits for its ready line.
func startServer(t *testing.T, extraEnv ...string) *server {
	t.Helper()
	db := apptest.New(t)
	env := map[string]string{"DATABASE_URL": db.URL, "LOG_LEVEL": "error"}
	for _, kv := range extraEnv {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	ctx, cancel := context.WithCancel(context.Background())
	outR, outW := io.Pipe()
	s := &server{db: db, accessLog: &capture.Buffer{}, stdout: &capture.Buffer{}}
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-addr", "127.0.0.1:0", "-template", filepath.Join("..", "..", "template.yaml")},
			func(k string) string { return env[k] }, outW, s.accessLog)
		outW.Close()
		done <- err
	}()
	ready := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(outR)
		for sc.Scan() {
			line := sc.Text()
			s.stdout.Write([]byte(line + "\n"))
			if strings.HasPrefix(line, "ready: ") {
				ready <- line
			}
		}
	}()
	select {
	case line := <-ready:
		i := strings.Index(line, "http://")
		require.Positive(t, i, line)
		s.base = strings.Fields(line[i:])[0]
	case err := <-done:
		cancel()
		t.Fatalf("the server stopped before it was ready: %v\n%s", err, s.accessLog.String())
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("the server did not print its ready line")
	}
	var once sync.Once
	var stopErr error
	s.stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case stopErr = <-done:
			case <-time.After(30 * time.Second):
				t.Error("the server did not stop within 30s")
			}
		})
		return stopErr
	}
	t.Cleanup(func() { _ = s.stop() })
	return s
}

type client struct {
	t     *testing.T
	base  string
	token string
}

type answer struct {
	status int
	header http.Header
	body   string
	json   map[string]any
}

func (c *client) do(method, path, key, body string) answer {
	c.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, c.base+path, r)
	require.NoError(c.t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.t, err)
	a := answer{status: resp.StatusCode, header: resp.Header, body: string(b)}
	if len(b) > 0 {
		_ = json.Unmarshal(b, &a.json)
	}
	return a
}

func newClient(t *testing.T, base string) *client {
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: uuid.NewString()})
	require.NoError(t, err)
	return &client{t: t, base: base, token: tok}
}

func requireProblem(t *testing.T, a answer, status int, code string) {
	t.Helper()
	require.Equal(t, status, a.status, a.body)
	require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), a.body)
	require.Equal(t, code, a.json["code"], a.body)
	require.Equal(t, float64(status), a.json["status"], a.body)
	require.NotEmpty(t, a.json["type"], a.body)
	require.NotEmpty(t, a.json["title"], a.body)
}

// TestEndToEnd drives the local server over real HTTP with the real
// functions and a real PostgreSQL.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	srv := startServer(t)
	require.Contains(t, srv.stdout.String(), "DATABASE_URL=postgres://")
	alice := newClient(t, srv.base)
	bob := newClient(t, srv.base)
	requests := 0
	count := func(n int) { requests += n }

	// Create, then replay: the same status, the same bytes, marked.
	key := uuid.NewString()
	created := alice.do("POST", "/tasks", key, `{"title":"Write the deploy guide","due_date":"2026-12-31"}`)
	count(1)
	require.Equal(t, 201, created.status, created.body)
	id, _ := created.json["id"].(string)
	require.NotEmpty(t, id)
	require.Equal(t, "/tasks/"+id, created.header.Get("Location"))
	require.Empty(t, created.header.Get("Idempotent-Replayed"))
	require.NotEmpty(t, created.header.Get("Apigw-Requestid"))

	replayed := alice.do("POST", "/tasks", key, `{ "due_date": "2026-12-31", "title": "Write the deploy guide" }`)
	count(1)
	require.Equal(t, 201, replayed.status, replayed.body)
	require.Equal(t, "true", replayed.header.Get("Idempotent-Replayed"))
	require.Equal(t, created.body, replayed.body)
	require.Equal(t, created.header.Get("Location"), replayed.header.Get("Location"))

	// The same key with another body.
	requireProblem(t, alice.do("POST", "/tasks", key, `{"title":"Something else"}`), 422, "idempotency_key_reused")
	count(1)

	// Two concurrent requests with one key: one runs, the other is told
	// it is in progress or gets the replay; one task either way.
	key2 := uuid.NewString()
	var wg sync.WaitGroup
	answers := make([]answer, 2)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i] = alice.do("POST", "/tasks", key2, `{"title":"Concurrent"}`)
		}()
	}
	wg.Wait()
	count(2)
	firsts, others := 0, 0
	var concurrentID string
	for _, a := range answers {
		switch {
		case a.status == 201 && a.header.Get("Idempotent-Replayed") == "":
			firsts++
			concurrentID, _ = a.json["id"].(string)
		case a.status == 201:
			others++
		case a.status == 409:
			requireProblem(t, a, 409, "idempotency_key_in_use")
			require.Equal(t, "1", a.header.Get("Retry-After"))
			others++
		default:
			t.Fatalf("concurrent request: unexpected %d %s", a.status, a.body)
		}
	}
	require.Equal(t, 1, firsts, "exactly one of the two ran")
	require.Equal(t, 1, others)
	for _, a := range answers {
		if a.status == 201 {
			require.Equal(t, concurrentID, a.json["id"], "a replay is of the one task")
		}
	}

	list := alice.do("GET", "/tasks", "", "")
	count(1)
	require.Equal(t, 200, list.status, list.body)
	require.Len(t, list.json["tasks"], 2, "one task per key: %s", list.body)

	// Update, delete, get.
	updated := alice.do("PATCH", "/tasks/"+id, uuid.NewString(), `{"status":"done"}`)
	count(1)
	require.Equal(t, 200, updated.status, updated.body)
	require.Equal(t, "done", updated.json["status"])
	deleted := alice.do("DELETE", "/tasks/"+id, uuid.NewString(), "")
	count(1)
	require.Equal(t, 204, deleted.status, deleted.body)
	require.Empty(t, deleted.body)
	requireProblem(t, alice.do("GET", "/tasks/"+id, "", ""), 404, "not_found")
	count(1)

	// Another user sees none of Alice's tasks, and her key is his own.
	bobList := bob.do("GET", "/tasks", "", "")
	count(1)
	require.Equal(t, 200, bobList.status)
	require.Empty(t, bobList.json["tasks"])
	requireProblem(t, bob.do("GET", "/tasks/"+concurrentID, "", ""), 404, "not_found")
	requireProblem(t, bob.do("PATCH", "/tasks/"+concurrentID, uuid.NewString(), `{"status":"done"}`), 404, "not_found")
	requireProblem(t, bob.do("DELETE", "/tasks/"+concurrentID, uuid.NewString(), ""), 404, "not_found")
	count(3)
	bobs := bob.do("POST", "/tasks", key2, `{"title":"Concurrent"}`)
	count(1)
	require.Equal(t, 201, bobs.status, bobs.body)
	require.Empty(t, bobs.header.Get("Idempotent-Replayed"), "a key is scoped to its user")
	require.NotEqual(t, concurrentID, bobs.json["id"])
	aliceTask := alice.do("GET", "/tasks/"+concurrentID, "", "")
	count(1)
	require.Equal(t, 200, aliceTask.status, "Alice still has her task")

	// Refused keys and a refused token.
	requireProblem(t, alice.do("POST", "/tasks", "", `{"title":"x"}`), 400, "idempotency_key_missing")
	requireProblem(t, alice.do("POST", "/tasks", "not-a-uuid", `{"title":"x"}`), 400, "idempotency_key_invalid")
	requireProblem(t, alice.do("POST", "/tasks", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", `{"title":"x"}`), 400, "idempotency_key_invalid")
	count(3)
	anonymous := &client{t: t, base: srv.base}
	noToken := anonymous.do("POST", "/tasks", uuid.NewString(), `{"title":"x"}`)
	count(1)
	require.Equal(t, 401, noToken.status)
	require.Equal(t, `{"message":"Unauthorized"}`, noToken.body, "the gateway's own 401")
	require.Equal(t, "application/json", noToken.header.Get("Content-Type"))
	badToken := &client{t: t, base: srv.base, token: "not.a.jwt"}
	require.Equal(t, `{"message":"Unauthorized"}`, badToken.do("GET", "/tasks", "", "").body)
	count(1)
	notFound := alice.do("GET", "/nothing-here", "", "")
	count(1)
	require.Equal(t, 404, notFound.status)
	require.Equal(t, `{"message":"Not Found"}`, notFound.body)

	// One access log line per request; then a clean stop.
	require.NoError(t, srv.stop())
	var lines []string
	for _, l := range strings.Split(srv.accessLog.String(), "\n") {
		if strings.HasPrefix(l, "127.0.0.1 - - [") {
			lines = append(lines, l)
		}
	}
	require.Len(t, lines, requests, srv.accessLog.String())
	require.Contains(t, srv.stdout.String(), "stopped")
}

func TestRefusesPublicAddress(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"0.0.0.0:3000", ":3000", "192.0.2.1:3000"} {
		err := run(context.Background(), []string{"-addr", addr}, func(string) string { return "" }, io.Discard, io.Discard)
		require.ErrorIs(t, err, localapi.ErrNotLoopback, addr)
	}
}

// TestAddrInUse: a port another process holds is refused at once, before
// any database is started, with the way to choose another port.
func TestAddrInUse(t *testing.T) {
	t.Parallel()
	ln, err := localapi.Listen(context.Background(), "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	err = run(context.Background(), []string{"-addr", ln.Addr().String()}, func(string) string { return "" }, io.Discard, io.Discard)
	require.ErrorIs(t, err, localapi.ErrAddrInUse)
	require.ErrorContains(t, err, ln.Addr().String())
	require.ErrorContains(t, err, "make run PORT=")
}

func TestTemplateCORS(t *testing.T) {
	t.Parallel()
	tpl, err := samtemplate.Parse([]byte(`
Globals:
  HttpApi:
    CorsConfiguration:
      AllowOrigins: ["*"]
      AllowMethods: [GET, POST]
      AllowHeaders: [authorization, !Ref Other]
      MaxAge: 600
Resources:
  Api:
    Type: AWS::Serverless::HttpApi
`))
	require.NoError(t, err)
	require.Equal(t, &localapi.CORS{
		AllowOrigins: []string{"*"}, AllowMethods: []string{"GET", "POST"}, AllowHeaders: []string{"authorization"}, MaxAge: 600,
	}, templateCORS(tpl))

	tpl, err = samtemplate.Parse([]byte("Resources:\n  Api:\n    Type: AWS::Serverless::HttpApi\n    Properties:\n      CorsConfiguration: true\n"))
	require.NoError(t, err)
	require.Equal(t, &localapi.CORS{AllowOrigins: []string{"*"}}, templateCORS(tpl))

	tpl, err = samtemplate.Parse([]byte("Resources:\n  Api:\n    Type: AWS::Serverless::HttpApi\n"))
	require.NoError(t, err)
	require.Nil(t, templateCORS(tpl))
}
