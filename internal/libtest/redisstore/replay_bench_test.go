package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// BenchmarkWrapReplay is the decorator's replay on the store, one client:
// its allocations are the client's whole path; its time includes the
// round trip.
func BenchmarkWrapReplay(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		st := must.Value(redisstore.New(c, nil))
		h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"1"}`}, nil
		}, idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}})
		if err != nil {
			b.Fatal(err)
		}
		req := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Body: `{"title":"Write the deploy guide"}`,
			Headers: map[string]string{"idempotency-key": uuid.NewString(), "content-type": "application/json"}}
		req.RequestContext.HTTP.Method = http.MethodPost
		req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": uuid.NewString()}},
		}
		ctx := context.Background()
		if _, err := h(ctx, req); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			resp, err := h(ctx, req)
			if err != nil || resp.Headers[idempotency.ReplayedHeader] != "true" {
				b.Fatal(resp, err)
			}
		}
	})
}
