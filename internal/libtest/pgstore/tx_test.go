package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestAtomicCompletionThroughWrap runs a handler that completes its key in
// its own transaction (CompleteRunInTx): the
// decorator does not complete again, the replay is the handler's response,
// and a handler whose commit fails has its key released for the retry.
func TestAtomicCompletionThroughWrap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	_, err := db.Pool.Exec(ctx, `CREATE TABLE work (key text PRIMARY KEY)`)
	require.NoError(t, err)
	counter := &statementCounter{}
	st := must.Value(pgstore.New(newPool(t, db.URL, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil))

	failCommit := false
	runs := 0
	handler := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		info, ok := idempotency.FromContext(ctx)
		require.True(t, ok)
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if _, err := tx.Exec(ctx, `INSERT INTO work VALUES ($1)`, info.Key); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		resp := events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"key":"` + info.Key + `"}`}
		ok, err = st.CompleteRunInTx(ctx, tx, resp)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		require.True(t, ok)
		again, err := st.CompleteRunInTx(ctx, tx, resp)
		require.NoError(t, err)
		require.False(t, again, "a second call must not complete the run again")
		if failCommit {
			return events.APIGatewayV2HTTPResponse{}, errors.New("commit failed")
		}
		if err := tx.Commit(ctx); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		return resp, nil
	}
	wrapped, err := idempotency.Wrap(handler, quiet(idempotency.Config{Store: st}))
	require.NoError(t, err)

	req := protectedRequest("POST", "/orders", uuid.NewString(), uuid.NewString(), `{"a":1}`)

	counter.n.Store(0)
	first, err := wrapped(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 201, first.StatusCode)
	// claim, then BEGIN, INSERT, the completion and COMMIT in the handler's
	// transaction; no completion by the decorator after it.
	require.EqualValues(t, 1, counter.n.Load(), "the store pool saw the claim only")

	replay, err := wrapped(ctx, req)
	require.NoError(t, err)
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, 1, runs)

	// A failed commit: the key is released, the retry runs again.
	failCommit = true
	req.Headers["idempotency-key"] = uuid.NewString()
	_, err = wrapped(ctx, req)
	require.Error(t, err)
	failCommit = false
	retry, err := wrapped(ctx, req)
	require.NoError(t, err)
	require.Equal(t, 201, retry.StatusCode)
	require.Equal(t, 3, runs)
	var rows int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM work`).Scan(&rows))
	require.Equal(t, 2, rows, "the failed attempt committed nothing")
}

// TestCompleteInTxKeepsTheRunAlive runs a handler without a deadline (its
// lease renewed by the heartbeat) that commits its completion in its own
// transaction and then goes on working for several beats: the heartbeat
// renews nothing once the completion is the handler's, and neither cancels
// the run nor reports a lost lease.
func TestCompleteInTxKeepsTheRunAlive(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))
	const beat = 300 * time.Millisecond
	var after error
	handler := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp := events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"done":true}`}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		defer func() { _ = tx.Rollback(ctx) }()
		if ok, err := st.CompleteRunInTx(ctx, tx, resp); err != nil || !ok {
			return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("completing in the transaction: %v, %w", ok, err)
		}
		if err := tx.Commit(ctx); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		// Work after the commit (a notification, a metric), over several
		// renewal periods.
		select {
		case <-time.After(2 * beat):
		case <-ctx.Done():
		}
		after = context.Cause(ctx)
		return resp, nil
	}
	var logs bytes.Buffer
	cfg := quiet(idempotency.Config{Store: st, Settings: idempotency.Settings{Heartbeat: beat}})
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	wrapped, err := idempotency.Wrap(handler, cfg)
	require.NoError(t, err)
	resp, err := wrapped(ctx, protectedRequest("POST", "/orders", uuid.NewString(), uuid.NewString(), `{}`))
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode)
	require.NoError(t, after, "the run's context stays live after its own transaction completed the record")
	require.Contains(t, logs.String(), `"outcome":"completed"`)
	require.NotContains(t, logs.String(), `"renew_calls"`, "once the handler holds the completion, nothing is renewed")
	require.NotContains(t, logs.String(), "lease", "no lost lease is reported")
}
