package pgstore_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/capture"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestCompleteRunInTx: the one call that takes the run over and writes the
// completion in the handler's transaction, through Wrap and Function; a
// store that is not the run's own is refused.
func TestCompleteRunInTx(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE work (key text PRIMARY KEY)`)
	require.NoError(t, err)
	st := must.Value(pgstore.New(db.Pool, nil))
	other := must.Value(pgstore.New(db.Pool, nil))

	runs := 0
	handler := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		info, _ := idempotency.FromContext(ctx)
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO work VALUES ($1)`, info.Key)
		require.NoError(t, err)
		resp := events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"key":"` + info.Key + `"}`}
		_, err = other.CompleteRunInTx(ctx, tx, resp)
		require.Error(t, err, "only the run's own store completes it")
		_, err = st.CompleteRunInTx(ctx, tx, "not a response")
		require.Error(t, err, "a protected request completes with its response")
		ok, err := st.CompleteRunInTx(ctx, tx, resp)
		require.NoError(t, err)
		require.True(t, ok)
		ok, err = st.CompleteRunInTx(ctx, tx, resp)
		require.NoError(t, err)
		require.False(t, ok, "once")
		require.NoError(t, tx.Commit(ctx))
		return resp, nil
	}
	wrapped, err := idempotency.Wrap(handler, quiet(idempotency.Config{Store: st}))
	require.NoError(t, err)
	req := protectedRequest("POST", "/orders", uuid.NewString(), uuid.NewString(), `{}`)
	first, err := wrapped(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 201, first.StatusCode)
	replay, err := wrapped(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, "true", replay.Headers[idempotency.ReplayedHeader])
	require.Equal(t, 1, runs)

	// Outside a run there is nothing to take over.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	ok, err := st.CompleteRunInTx(ctx, tx, first)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, tx.Rollback(ctx))

	// A function's result is completed as JSON.
	fnRuns := 0
	f, err := idempotency.Function(func(ctx context.Context, id string) (map[string]int, error) {
		fnRuns++
		tx, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		out := map[string]int{"n": fnRuns}
		ok, err := st.CompleteRunInTx(ctx, tx, out)
		require.NoError(t, err)
		require.True(t, ok)
		return out, tx.Commit(ctx)
	}, idempotency.FunctionConfig[string]{Store: st, Name: "atomic-" + uuid.NewString(), Key: func(_ context.Context, id string) (string, error) { return id, nil },
		Settings: idempotency.Settings{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	id := uuid.NewString()
	a, err := f(ctx, id)
	require.NoError(t, err)
	b, err := f(ctx, id)
	require.NoError(t, err)
	require.Equal(t, a, b)
	require.Equal(t, 1, fnRuns)
}

// TestAtomicCompletionMismatchIsRefused: a handler that completes its
// record with one response and answers with another never gives the client
// an answer its retry would not get again: the answer is refused (500
// idempotency_response_mismatch) and the retry replays the completed one.
func TestAtomicCompletionMismatchIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))

	t.Run("Wrap", func(t *testing.T) {
		t.Parallel()
		wrapped, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = st.CompleteRunInTx(ctx, tx, events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: "B"})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(ctx))
			return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: "A"}, nil
		}, quiet(idempotency.Config{Store: st}))
		require.NoError(t, err)
		req := protectedRequest("POST", "/orders", uuid.NewString(), uuid.NewString(), `{}`)
		first, err := wrapped(ctx, req)
		require.NoError(t, err)
		require.Equal(t, http.StatusInternalServerError, first.StatusCode)
		require.Equal(t, idempotency.CodeResponseMismatch, problemCodeOf(t, first.Body))
		replay, err := wrapped(ctx, req)
		require.NoError(t, err)
		require.Equal(t, "B", replay.Body, "the retry gets the completed response")
	})

	t.Run("Middleware", func(t *testing.T) {
		t.Parallel()
		user := uuid.NewString()
		mw, err := idempotency.Middleware(quiet(idempotency.Config{Store: st, Subject: idempotency.StaticSubject(user)}))
		require.NoError(t, err)
		runs := 0
		srv := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			runs++
			tx, err := db.Pool.Begin(r.Context())
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(r.Context()) }()
			_, err = st.CompleteRunInTx(r.Context(), tx, events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "B"})
			require.NoError(t, err)
			require.NoError(t, tx.Commit(r.Context()))
			w.Header().Set("Content-Type", "text/plain")
			_, _ = io.WriteString(w, "A") // not what it completed with
		})))
		t.Cleanup(srv.Close)
		key := uuid.NewString()
		send := func() (int, string) {
			req, err := http.NewRequest(http.MethodPost, srv.URL+"/notes", strings.NewReader(`{}`))
			require.NoError(t, err)
			req.Header.Set("Idempotency-Key", key)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			return resp.StatusCode, string(b)
		}
		status, body := send()
		require.Equal(t, http.StatusInternalServerError, status)
		require.Equal(t, idempotency.CodeResponseMismatch, problemCodeOf(t, body))
		status, body = send()
		require.Equal(t, http.StatusOK, status)
		require.Equal(t, "B", body, "a replay is what a client got (the first got nothing but the refusal)")
		require.Equal(t, 1, runs)
	})
}

func problemCodeOf(t *testing.T, body string) string {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &p), body)
	return p.Code
}

// TestAtomicCompletionThenFailure: a handler that completes its record in
// its transaction, commits, and then answers with a status that is not
// stored leaves the record completed; the log says so (outcome completed,
// not a lost lease), and the retry replays. When its transaction rolls
// back instead, the key is released and the retry runs.
func TestAtomicCompletionThenFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))

	for _, commit := range []bool{true, false} {
		t.Run(map[bool]string{true: "committed", false: "rolled back"}[commit], func(t *testing.T) {
			t.Parallel()
			logs := &capture.Buffer{}
			runs := 0
			wrapped, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
				runs++
				tx, err := db.Pool.Begin(ctx)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback(ctx) }()
				_, err = st.CompleteRunInTx(ctx, tx, events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: "B"})
				require.NoError(t, err)
				if commit {
					require.NoError(t, tx.Commit(ctx))
				}
				return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusServiceUnavailable, Body: "later"}, nil
			}, idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Metrics: io.Discard}})
			require.NoError(t, err)
			req := protectedRequest("POST", "/orders", uuid.NewString(), uuid.NewString(), `{}`)
			first, err := wrapped(ctx, req)
			require.NoError(t, err)
			require.Equal(t, http.StatusServiceUnavailable, first.StatusCode, "the handler's own answer")
			var line map[string]any
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(logs.String())), &line))

			retry, err := wrapped(ctx, req)
			require.NoError(t, err)
			if commit {
				require.Equal(t, "completed", line["outcome"])
				require.Contains(t, line["error"], "completed the record in its own transaction")
				require.NotContains(t, line["error"], "lease")
				require.Equal(t, "B", retry.Body, "the retry replays the committed completion")
				require.Equal(t, "true", retry.Headers[idempotency.ReplayedHeader])
				require.Equal(t, 1, runs)
			} else {
				require.Equal(t, "released", line["outcome"])
				require.NotContains(t, line, "error")
				require.Equal(t, 2, runs, "the retry runs again")
			}
		})
	}
}
