package pgstore_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestCompleteInOpenTxIsNotLost: a heartbeat run that completes its record
// with CompleteRunInTx and keeps writing in that transaction for longer
// than a beat holds the record's row lock all that time. The renewals must
// not wait on it, and the run is not cancelled as lost: its later writes
// and the completion commit together.
func TestCompleteInOpenTxIsNotLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))
	_, err := db.Pool.Exec(ctx, `CREATE TABLE orders (id uuid PRIMARY KEY, note text)`)
	require.NoError(t, err)
	const beat = 300 * time.Millisecond
	orderID := uuid.New()
	var cause error
	handler := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		resp := events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"order":"` + orderID.String() + `"}`}
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
		if ok, err := st.CompleteRunInTx(ctx, tx, resp); err != nil || !ok {
			return events.APIGatewayV2HTTPResponse{}, fmt.Errorf("completing in the transaction: %v, %w", ok, err)
		}
		// Writes after the completion, in the same transaction, that last
		// longer than a beat: the commit comes later than the next renewal.
		if _, err := tx.Exec(ctx, `INSERT INTO orders VALUES ($1, 'placed')`, orderID); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_sleep(0.4)`); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		if _, err := tx.Exec(ctx, `UPDATE orders SET note = 'paid' WHERE id = $1`, orderID); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		if err := tx.Commit(ctx); err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		cause = context.Cause(ctx)
		return resp, nil
	}
	var logs bytes.Buffer
	cfg := quiet(idempotency.Config{Store: st, Settings: idempotency.Settings{Heartbeat: beat}})
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	wrapped, err := idempotency.Wrap(handler, cfg)
	require.NoError(t, err)
	userID, key := uuid.NewString(), uuid.NewString()
	resp, err := wrapped(ctx, protectedRequest("POST", "/orders", userID, key, `{}`))
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode, "%s\n%s", resp.Body, logs.String())
	require.NoError(t, cause, "the run is not cancelled while its own transaction is open")
	var note string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT note FROM orders WHERE id = $1`, orderID).Scan(&note))
	require.Equal(t, "paid", note, "the writes after the completion committed")
	rec, found, err := st.Get(ctx, idempotency.SubjectUUID(userID), key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.NotContains(t, logs.String(), "lease", "no lost lease is reported")
}
