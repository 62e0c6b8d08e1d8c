package storekit

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// BenchWrapReplay measures the decorator's replay on st, one client: a
// request is answered once, then replayed b.N times. Its allocations are
// the client's whole path; its time includes the store's round trip.
func BenchWrapReplay(b *testing.B, st idemstore.Store) {
	b.Helper()
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
}
