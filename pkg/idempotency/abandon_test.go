package idempotency_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
)

// txMemStore is a memStore that says it completes inside a caller's
// transaction, so that AtomicCompletion hands completions out on it.
type txMemStore struct{ *memStore }

func (txMemStore) CompletesInTx() {}

// TestAbandonCompletion: a handler that took its completion over and gives
// it back (its transaction rolled back) answers with another response, which
// the engine stores and replays; outside a run, or with nothing taken over,
// AbandonCompletion reports false.
func TestAbandonCompletion(t *testing.T) {
	t.Parallel()
	require.False(t, idempotency.AbandonCompletion(context.Background()))
	var abandonedTwice bool
	h, err := idempotency.Wrap(func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		planned := events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"planned":true}`}
		_, ok := idempotency.AtomicCompletion(ctx, planned)
		require.True(t, ok)
		require.True(t, idempotency.AbandonCompletion(ctx), "the completion was not written: it goes back")
		abandonedTwice = idempotency.AbandonCompletion(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: `{"found":true}`}, nil
	}, idempotency.Config{Store: txMemStore{newMemStore()}, Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard})
	require.NoError(t, err)

	first, err := h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, first.StatusCode, "the other answer is given, not refused as a mismatch")
	require.False(t, abandonedTwice)
	replay, err := h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	require.Equal(t, "true", replay.Headers[idempotency.ReplayedHeader])
	require.Equal(t, `{"found":true}`, replay.Body, "the engine stored the answer given")
}
