package dbsetup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
)

type replies struct {
	mu  sync.Mutex
	got []map[string]any
}

func (r *replies) last() map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[len(r.got)-1]
}

func bucket(t *testing.T, hang time.Duration) (*httptest.Server, *replies) {
	r := &replies{}
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if hang > 0 {
			select {
			case <-time.After(hang):
			case <-stop:
			}
			return
		}
		require.Equal(t, http.MethodPut, req.Method)
		require.Empty(t, req.Header.Get("Content-Type"), "the pre-signed URL is signed without one")
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		require.NoError(t, json.Unmarshal(b, &m))
		r.mu.Lock()
		r.got = append(r.got, m)
		r.mu.Unlock()
	}))
	t.Cleanup(func() { close(stop); srv.Close() })
	return srv, r
}

func request(requestType, url string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"RequestType": requestType, "ResponseURL": url + "/r?X-Amz-Signature=s", "RequestId": "r1", "StackId": "s", "LogicalResourceId": "DatabaseSetup"})
	return b
}

// TestCustomResourceReplies: Create and Update reply the setup's outcome
// (FAILED with the reason), Delete SUCCESS without running it, a setup on a
// newer database SUCCESS with a log line that says nothing was migrated,
// and any other event goes to Other.
func TestCustomResourceReplies(t *testing.T) {
	t.Parallel()
	srv, got := bucket(t, 0)
	var log bytes.Buffer
	var outcome dbsetup.Summary
	var fail error
	ran := 0
	cr := &dbsetup.CustomResource{
		ResourceID: "ichido-database-setup",
		Setup: func(context.Context) (dbsetup.Summary, error) {
			ran++
			return outcome, fail
		},
		Other: func(context.Context, json.RawMessage) (any, error) { return "other", nil },
		Log:   slog.New(slog.NewJSONHandler(&log, nil)),
	}
	ctx := context.Background()

	outcome = dbsetup.Summary{Version: 6, Applied: []string{"00006_task_activity.sql"}, Server: "16.4", Cron: &dbsetup.CronProof{Evidence: "probe"}}
	_, err := cr.Handle(ctx, request("Create", srv.URL))
	require.NoError(t, err)
	require.Equal(t, "SUCCESS", got.last()["Status"])
	require.Equal(t, "ichido-database-setup", got.last()["PhysicalResourceId"])
	require.Equal(t, map[string]any{"Version": "6", "Applied": "1", "Server": "16.4", "Cron": "probe"}, got.last()["Data"])

	fail = errors.New("dbsetup: pg_cron cannot run the migrate user's jobs")
	_, err = cr.Handle(ctx, request("Update", srv.URL))
	require.NoError(t, err, "replied: the invocation succeeds, so Lambda does not retry")
	require.Equal(t, "FAILED", got.last()["Status"])
	require.Contains(t, got.last()["Reason"], "pg_cron cannot run")

	fail, outcome = nil, dbsetup.Summary{Version: 7, Ahead: "the app's migrations are at 7, this code's newest is 6"}
	_, err = cr.Handle(ctx, request("Update", srv.URL))
	require.NoError(t, err)
	require.Equal(t, "SUCCESS", got.last()["Status"])
	require.Contains(t, log.String(), "database setup skipped")
	require.Contains(t, log.String(), "this code's newest is 6")

	ran = 0
	_, err = cr.Handle(ctx, request("Delete", srv.URL))
	require.NoError(t, err)
	require.Equal(t, "SUCCESS", got.last()["Status"])
	require.Zero(t, ran, "Delete leaves the database alone")

	out, err := cr.Handle(ctx, json.RawMessage(`{}`))
	require.NoError(t, err)
	require.Equal(t, "other", out)
}

// TestCustomResourceReplyTimesOut: a reply that cannot get through ends
// within ReplyTimeout, with a plain log line, and fails the invocation (so
// that Lambda tries again).
func TestCustomResourceReplyTimesOut(t *testing.T) {
	t.Parallel()
	srv, _ := bucket(t, time.Minute)
	var log bytes.Buffer
	cr := &dbsetup.CustomResource{
		ResourceID:   "ichido-database-setup",
		Setup:        func(context.Context) (dbsetup.Summary, error) { return dbsetup.Summary{}, nil },
		ReplyTimeout: 300 * time.Millisecond,
		Log:          slog.New(slog.NewTextHandler(&log, nil)),
	}
	start := time.Now()
	_, err := cr.Handle(context.Background(), request("Update", srv.URL))
	require.ErrorContains(t, err, "replying to CloudFormation")
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Contains(t, log.String(), "could not reply SUCCESS to CloudFormation for Update DatabaseSetup")

	// The invocation's own context bounds it too.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	cr.ReplyTimeout = time.Minute
	_, err = cr.Handle(ctx, request("Update", srv.URL))
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestCustomResourceReplyFits: a long failure whose text JSON escapes to
// more bytes (quotes, <, >, &, non-ASCII) is cut so that the marshalled
// reply fits CloudFormation's 4,096 bytes, at a character boundary, saying
// that the log has the rest.
func TestCustomResourceReplyFits(t *testing.T) {
	t.Parallel()
	var sizes []int
	var last map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		sizes = append(sizes, len(b))
		last = nil
		_ = json.Unmarshal(b, &last)
	}))
	t.Cleanup(srv.Close)
	for _, text := range []string{
		strings.Repeat(`<"&>`, 1500),
		strings.Repeat("é", 3000),
		strings.Repeat("x", 4100),
		"short",
	} {
		cr := &dbsetup.CustomResource{
			ResourceID: "ichido-database-setup",
			Setup:      func(context.Context) (dbsetup.Summary, error) { return dbsetup.Summary{}, errors.New(text) },
			Log:        slog.New(slog.NewTextHandler(io.Discard, nil)),
		}
		_, err := cr.Handle(context.Background(), request("Create", srv.URL))
		require.NoError(t, err)
		require.LessOrEqual(t, sizes[len(sizes)-1], 4096)
		reason := last["Reason"].(string)
		require.True(t, utf8.ValidString(reason))
		if text == "short" {
			require.Equal(t, "short", reason)
			continue
		}
		require.True(t, strings.HasSuffix(reason, "… (the function's log has the rest)"), "cut, saying so: %.60s…", reason)
		require.Greater(t, sizes[len(sizes)-1], 3500, "cut no more than it must")
	}
}
