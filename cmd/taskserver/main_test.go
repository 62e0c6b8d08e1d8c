package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// token is an unsigned bearer token for sub, as make token prints one.
func token(sub string) string {
	enc := base64.RawURLEncoding.EncodeToString
	claims, _ := json.Marshal(map[string]any{"sub": sub, "exp": time.Now().Add(time.Hour).Unix()})
	return "Bearer " + enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc(claims) + "." + enc([]byte("sig"))
}

type answer struct {
	status int
	header http.Header
	body   string
}

// TestServerOverHTTP starts the server on a loopback port with a database of
// its own and talks to it over real HTTP: a create with a key, its
// byte-for-byte replay, the same key with another body, a refused key and
// user, and the task read back.
func TestServerOverHTTP(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t) // the server applies the migrations
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	env := map[string]string{"DATABASE_URL": db.URL, "LOG_LEVEL": "error"}
	go func() { done <- serve(ctx, ln, true, func(k string) string { return env[k] }, io.Discard) }()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	base := "http://" + ln.Addr().String()
	client := &http.Client{Timeout: 10 * time.Second}

	do := func(method, path, auth, key, body string) answer {
		t.Helper()
		var r io.Reader
		if body != "" {
			r = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, base+path, r)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		req.Header.Set("Content-Type", "application/json")
		var resp *http.Response
		require.Eventually(t, func() bool { // the server migrates before it answers
			resp, err = client.Do(req)
			return err == nil
		}, 30*time.Second, 50*time.Millisecond)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return answer{resp.StatusCode, resp.Header, string(b)}
	}
	user := uuid.NewString()
	key := uuid.NewString()
	auth := token(user)

	first := do("POST", "/tasks", auth, key, `{"title":"Ship the HTTP server","due_date":"2026-12-31"}`)
	require.Equal(t, http.StatusCreated, first.status, first.body)
	var task map[string]any
	require.NoError(t, json.Unmarshal([]byte(first.body), &task))
	require.Equal(t, "/tasks/"+task["id"].(string), first.header.Get("Location"))
	require.Empty(t, first.header.Get("Idempotent-Replayed"))

	replay := do("POST", "/tasks", auth, key, `{ "due_date": "2026-12-31", "title": "Ship the HTTP server" }`)
	require.Equal(t, http.StatusCreated, replay.status)
	require.Equal(t, first.body, replay.body, "byte for byte")
	require.Equal(t, first.header.Get("Location"), replay.header.Get("Location"))
	require.Equal(t, "true", replay.header.Get("Idempotent-Replayed"))

	problemCode := func(a answer) string {
		t.Helper()
		require.Equal(t, "application/problem+json", a.header.Get("Content-Type"), a.body)
		var p map[string]any
		require.NoError(t, json.Unmarshal([]byte(a.body), &p))
		return p["code"].(string)
	}
	mismatch := do("POST", "/tasks", auth, key, `{"title":"Another task"}`)
	require.Equal(t, http.StatusUnprocessableEntity, mismatch.status)
	require.Equal(t, "idempotency_key_reused", problemCode(mismatch))
	missing := do("POST", "/tasks", auth, "", `{"title":"x"}`)
	require.Equal(t, http.StatusBadRequest, missing.status)
	require.Equal(t, "idempotency_key_missing", problemCode(missing))
	invalid := do("POST", "/tasks", auth, "6ba7b810-9dad-11d1-80b4-00c04fd430c8", `{"title":"x"}`)
	require.Equal(t, http.StatusBadRequest, invalid.status)
	require.Equal(t, "idempotency_key_invalid", problemCode(invalid))
	anonymous := do("POST", "/tasks", "", uuid.NewString(), `{"title":"x"}`)
	require.Equal(t, http.StatusUnauthorized, anonymous.status)
	require.Equal(t, "unauthenticated", problemCode(anonymous))

	got := do("GET", "/tasks/"+task["id"].(string), auth, "", "")
	require.Equal(t, http.StatusOK, got.status)
	require.JSONEq(t, first.body, got.body)
	list := do("GET", "/tasks?limit=5", auth, "", "")
	require.Equal(t, http.StatusOK, list.status)
	require.Contains(t, list.body, task["id"].(string))

	done1 := do("PATCH", "/tasks/"+task["id"].(string), auth, uuid.NewString(), `{"status":"done"}`)
	require.Equal(t, http.StatusOK, done1.status, done1.body)
	deleteKey := uuid.NewString()
	gone := do("DELETE", "/tasks/"+task["id"].(string), auth, deleteKey, "")
	require.Equal(t, http.StatusNoContent, gone.status, gone.body)
	again := do("DELETE", "/tasks/"+task["id"].(string), auth, deleteKey, "")
	require.Equal(t, http.StatusNoContent, again.status)
	require.Equal(t, "true", again.header.Get("Idempotent-Replayed"))
	require.Equal(t, http.StatusNotFound, do("GET", "/tasks/"+task["id"].(string), auth, "", "").status)
	require.Equal(t, "not_found", problemCode(do("GET", "/nowhere", auth, "", "")))

	var rows int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&rows))
	require.Equal(t, 3, rows, "the create, the update and the delete hold a key each")
}
