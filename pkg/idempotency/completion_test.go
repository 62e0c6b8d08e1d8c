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
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
)

// TestReturnCompletion: a handler whose store took its completion over
// and gave it back (its transaction rolled back) answers with another
// response, which the engine stores and replays; with nothing taken over,
// ReturnCompletion reports false.
func TestReturnCompletion(t *testing.T) {
	t.Parallel()
	_, inRun := runctx.From(context.Background())
	require.False(t, inRun)
	store := newMemStore()
	var taken, returned, returnedTwice bool
	var takeErr error
	h, err := idempotency.Wrap(func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		planned := events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"planned":true}`}
		if run, ok := runctx.From(ctx); ok {
			_, taken, takeErr = run.TakeCompletion(store, planned)
			returned = run.ReturnCompletion() // the completion was not written: it goes back
			returnedTwice = run.ReturnCompletion()
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusOK, Body: `{"found":true}`}, nil
	}, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}})
	require.NoError(t, err)

	first, err := h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	require.NoError(t, takeErr)
	require.True(t, taken)
	require.True(t, returned)
	require.False(t, returnedTwice)
	require.Equal(t, http.StatusOK, first.StatusCode, "the other answer is given, not refused as a mismatch")
	replay, err := h(context.Background(), request(userA, keyA))
	require.NoError(t, err)
	require.Equal(t, "true", replay.Headers[idempotency.ReplayedHeader])
	require.Equal(t, `{"found":true}`, replay.Body, "the engine stored the answer given")
}
