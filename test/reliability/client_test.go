package reliability

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/problem"
)

// httpClient talks to the workers; loopback only.
var httpClient = &http.Client{
	Timeout: 90 * time.Second,
	Transport: &http.Transport{
		MaxIdleConns:        512,
		MaxIdleConnsPerHost: 128,
		IdleConnTimeout:     30 * time.Second,
	},
}

// call is one HTTP request to the local API.
type call struct {
	method string
	path   string
	// keys are the Idempotency-Key header lines, in order; nil sends none.
	keys []string
	body []byte
	// sub is the token's subject; "" sends no Authorization header unless
	// auth is set.
	sub string
	// auth, when set, is the Authorization header as it stands.
	auth        string
	contentType string
}

// answer is an HTTP response, its body read.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// token returns a local access token for sub.
func token(t testing.TB, sub string) string {
	t.Helper()
	tok, err := localapi.NewToken(localapi.TokenOptions{Subject: sub})
	require.NoError(t, err)
	return tok
}

// send performs c against base and returns the answer, or the transport
// error.
func send(ctx context.Context, base string, c call, tok string) (answer, error) {
	req, err := http.NewRequestWithContext(ctx, c.method, base+c.path, bytes.NewReader(c.body))
	if err != nil {
		return answer{}, err
	}
	if c.body == nil {
		req.Body, req.ContentLength = http.NoBody, 0
	}
	ct := c.contentType
	if ct == "" && c.body != nil {
		ct = "application/json"
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	for _, k := range c.keys {
		req.Header.Add("Idempotency-Key", k)
	}
	switch {
	case c.auth != "":
		req.Header.Set("Authorization", c.auth)
	case tok != "":
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, err
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: body}, nil
}

// do performs c and fails the test on a transport error.
func do(t testing.TB, base string, c call) answer {
	t.Helper()
	var tok string
	if c.sub != "" {
		tok = token(t, c.sub)
	}
	a, err := send(context.Background(), base, c, tok)
	require.NoError(t, err, "%s %s", c.method, c.path)
	return a
}

// replayed reports whether the answer is marked as a replay.
func (a answer) replayed() bool { return a.header.Get("Idempotent-Replayed") == "true" }

// problem decodes a problem+json answer and checks its shape: the media
// type, the status repeated in the body, a type, a title and a code.
func (a answer) problem(t testing.TB) problem.Details {
	t.Helper()
	require.Equal(t, problem.ContentType, a.header.Get("Content-Type"), "body: %s", a.body)
	var d problem.Details
	require.NoError(t, json.Unmarshal(a.body, &d), "body: %s", a.body)
	require.Equal(t, a.status, d.Status, "body: %s", a.body)
	require.NotEmpty(t, d.Type)
	require.NotEmpty(t, d.Title)
	require.NotEmpty(t, d.Code)
	noInternals(t, a.body)
	return d
}

// internalMarkers are fragments that only internal error text would carry.
var internalMarkers = []string{
	"SQLSTATE", "pgx", "pgconn", "dial tcp", "connection refused", "127.0.0.1:",
	"goroutine ", "panic", "runtime error", "idempotency_keys", "duplicate key",
	"context deadline", "EOF", ".go:",
}

// noInternals fails when a body shows internal error text.
func noInternals(t testing.TB, body []byte) {
	t.Helper()
	for _, m := range internalMarkers {
		require.NotContains(t, string(body), m, "internal text reached the client")
	}
}

// taskID returns the id of the task in a 201 or 200 answer.
func (a answer) taskID(t testing.TB) string {
	t.Helper()
	var v struct {
		ID string `json:"id"`
	}
	require.NoError(t, json.Unmarshal(a.body, &v), "body: %s", a.body)
	require.NotEmpty(t, v.ID, "body: %s", a.body)
	return v.ID
}

// newKey returns a fresh Idempotency-Key (UUID v4).
func newKey() string { return uuid.NewString() }

// newUser returns a fresh user id (a UUID, as Cognito's sub is).
func newUser() string { return uuid.NewString() }

// counts are the row counts of the two tables a request may write.
type counts struct {
	Tasks, Keys int
}

func countRows(t testing.TB, pool *pgxpool.Pool) counts {
	t.Helper()
	var c counts
	err := pool.QueryRow(context.Background(),
		`SELECT (SELECT count(*) FROM tasks), (SELECT count(*) FROM idempotency_keys)`).Scan(&c.Tasks, &c.Keys)
	require.NoError(t, err)
	return c
}

// duplicateTasks returns how many (user, key) pairs hold more than one
// task; it must be zero (the unique index forbids it, and this proves it).
func duplicateTasks(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(), `
		SELECT count(*) FROM (
			SELECT 1 FROM tasks WHERE idempotency_key IS NOT NULL
			GROUP BY user_id, idempotency_key HAVING count(*) > 1) d`).Scan(&n)
	require.NoError(t, err)
	return n
}

// taskBody returns a create body with a title unique to the caller.
func taskBody(title string) []byte {
	b, _ := json.Marshal(map[string]string{"title": title})
	return b
}

// lines joins the non-empty parts with "; ".
func lines(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, "; ")
}
