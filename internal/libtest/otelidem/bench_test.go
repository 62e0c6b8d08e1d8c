package otelidem_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
)

type v2Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

func benchCreate(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"order":"o-1"}`}, nil
}

// benchEvent is a POST of an HTTP API carrying key.
func benchEvent(key string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/orders", Headers: map[string]string{"idempotency-key": key, "content-type": "application/json"}, Body: `{"item":"book","quantity":2}`}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "auth0|bench"}},
	}
	return ev
}

// benchSetups are the ways a handler runs: without ichido, with no
// Observer, with otelidem over no-op providers and over the SDK recording
// every span (in memory, always sampled) and metric.
func benchSetups(b *testing.B) []struct {
	name string
	wrap func(b *testing.B) v2Handler
} {
	protect := func(obs func(b *testing.B) observe.Observer) func(b *testing.B) v2Handler {
		return func(b *testing.B) v2Handler {
			s := idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)), Metrics: io.Discard}
			if obs != nil {
				s.Observer = obs(b)
			}
			h, err := idempotency.Wrap(benchCreate, idempotency.Config{Store: memstore.New(), Settings: s})
			if err != nil {
				b.Fatal(err)
			}
			return h
		}
	}
	return []struct {
		name string
		wrap func(b *testing.B) v2Handler
	}{
		{"unprotected", func(*testing.B) v2Handler { return benchCreate }},
		{"observer=nil", protect(nil)},
		{"otelidem=noop", protect(func(*testing.B) observe.Observer {
			return otelidem.New(otelidem.WithTracerProvider(tracenoop.NewTracerProvider()), otelidem.WithMeterProvider(metricnoop.NewMeterProvider()))
		})},
		{"otelidem=sdk", protect(func(b *testing.B) observe.Observer {
			tp := sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.AlwaysSample()), sdktrace.WithSyncer(tracetest.NewInMemoryExporter()))
			mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
			b.Cleanup(func() {
				_ = tp.Shutdown(context.Background())
				_ = mp.Shutdown(context.Background())
			})
			return otelidem.New(otelidem.WithTracerProvider(tp), otelidem.WithMeterProvider(mp))
		})},
	}
}

// BenchmarkReplay: a repeat answered from the store.
func BenchmarkReplay(b *testing.B) {
	for _, setup := range benchSetups(b) {
		b.Run(setup.name, func(b *testing.B) {
			h := setup.wrap(b)
			ev := benchEvent(uuid.NewString())
			ctx := context.Background()
			if _, err := h(ctx, ev); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if _, err := h(ctx, ev); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkFirstCall: a new key, claimed, run and completed.
func BenchmarkFirstCall(b *testing.B) {
	for _, setup := range benchSetups(b) {
		b.Run(setup.name, func(b *testing.B) {
			h := setup.wrap(b)
			evs := make([]events.APIGatewayV2HTTPRequest, b.N)
			for i := range evs {
				evs[i] = benchEvent(uuid.NewString())
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := h(ctx, evs[i]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
