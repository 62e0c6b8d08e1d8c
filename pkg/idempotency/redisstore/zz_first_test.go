package redisstore_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

func BenchmarkZZFirst(b *testing.B) { zzFirst(b, slog.New(slog.NewJSONHandler(io.Discard, nil))) }

func BenchmarkZZFirstNoLog(b *testing.B) {
	zzFirst(b, slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelError})))
}

func zzFirst(b *testing.B, logger *slog.Logger) {
	c := redistest.NewClient(b)
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"0b6e9d9e-8f1f-4c55-9a0e-3f9d1c2b7a11","title":"bench task"}`}, nil
	}, idempotency.Config{Store: redisstore.New(c, nil), Logger: logger, Metrics: io.Discard})
	if err != nil {
		b.Fatal(err)
	}
	user := uuid.NewString()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/noop", Headers: map[string]string{"content-type": "application/json"}, Body: `{"title":"bench task","description":"measured by cmd/bench"}`}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}}}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ev.Headers = map[string]string{"content-type": "application/json", "idempotency-key": keys[i]}
		if _, err := h(ctx, ev); err != nil {
			b.Fatal(err)
		}
	}
}
