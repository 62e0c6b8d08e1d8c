package pgstore_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/pgtest"
)

// TestDecoratorRoundTrips counts the statements a protected request costs
// through idempotency.Wrap: a first request claims and completes, a replay
// only claims, and a safe method touches nothing.
func TestDecoratorRoundTrips(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	counter := &statementCounter{}
	st := pgstore.New(newPool(t, db.URL, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil)
	runs := 0
	h, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"1"}`}, nil
	}, idempotency.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: io.Discard})
	require.NoError(t, err)

	req := func(method string) events.APIGatewayV2HTTPRequest {
		return events.APIGatewayV2HTTPRequest{
			RawPath: "/tasks",
			Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"},
			Body:    `{"title":"x"}`,
			RequestContext: events.APIGatewayV2HTTPRequestContext{
				HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: "/tasks"},
				Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
					JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": uuid.NewString()}},
				},
			},
		}
	}
	first := req(http.MethodPost)
	resp, err := h(context.Background(), first)
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode)
	require.LessOrEqual(t, counter.take(), int64(2), "a first request: claim and complete")

	resp, err = h(context.Background(), first)
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, `{"id":"1"}`, resp.Body)
	require.Equal(t, 1, runs, "the retry was replayed")
	require.Equal(t, int64(1), counter.take(), "a replay is one statement")

	_, err = h(context.Background(), req(http.MethodGet))
	require.NoError(t, err)
	require.Zero(t, counter.take(), "a GET never touches the store")
}
