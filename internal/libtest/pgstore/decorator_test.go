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

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestDecoratorRoundTrips counts the statements a protected request costs
// through idempotency.Wrap: a first request claims and completes, a replay
// only claims, and a safe method touches nothing.
func TestDecoratorRoundTrips(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	counter := &statementCounter{}
	st := must.Value(pgstore.New(newPool(t, db.URL, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil))
	runs := 0
	h, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"1"}`}, nil
	}, quiet(idempotency.Config{Store: st}))
	require.NoError(t, err)

	user := uuid.NewString()
	req := func(method string) events.APIGatewayV2HTTPRequest {
		return protectedRequest(method, "/tasks", user, "8e03978e-40d5-43e8-bc93-6894a57f9324", `{"title":"x"}`)
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

// protectedRequest returns an HTTP API (v2) request as API Gateway hands it
// over after its JWT authorizer accepted user's token.
func protectedRequest(method, path, user, key, body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		RawPath: path,
		Headers: map[string]string{"idempotency-key": key},
		Body:    body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: method, Path: path},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}},
			},
		},
	}
}

// quiet sends the decorator's log and metric lines nowhere.
func quiet(cfg idempotency.Config) idempotency.Config {
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Metrics = io.Discard
	return cfg
}
