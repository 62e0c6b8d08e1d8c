package otelidem_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
)

// A handler protected by Wrap reports each call as a span and as metrics;
// the replay's span links to the span of the run that produced its answer.
// Here the SDK keeps them in memory; a real program sets its exporter up
// once, at cold start, and calls otelidem.New() without options to use the
// global providers.
func Example() {
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))

	create := func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"id":"t-1"}`}, nil
	}
	handler, err := idempotency.Wrap(create, idempotency.Config{
		Store: memstore.New(),
		Settings: idempotency.Settings{
			Observer: otelidem.New(otelidem.WithTracerProvider(tp), otelidem.WithMeterProvider(mp)),
			Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics:  io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}

	req := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, Body: `{}`}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "auth0|alice"}},
	}
	for range 2 {
		if _, err := handler(context.Background(), req); err != nil {
			panic(err)
		}
	}

	got := spans.GetSpans()
	for _, s := range got {
		a := map[string]string{}
		for _, kv := range s.Attributes {
			a[string(kv.Key)] = kv.Value.String()
		}
		fmt.Printf("%s (%s): outcome=%s status=%s store=%s events=%d\n",
			s.Name, s.SpanKind, a["ichido.outcome"], a["http.response.status_code"], a["ichido.store.name"], len(s.Events))
		for _, l := range s.Links {
			fmt.Println("  linked to the first call's span:", l.SpanContext.SpanID() == got[0].SpanContext.SpanID())
		}
	}

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		panic(err)
	}
	for _, m := range rm.ScopeMetrics[0].Metrics {
		fmt.Printf("%s (%s)\n", m.Name, m.Unit)
	}
	// Output:
	// idempotency POST (internal): outcome=completed status=201 store=memstore events=2
	// idempotency POST (internal): outcome=replayed status=201 store=memstore events=1
	//   linked to the first call's span: true
	// ichido.calls ({call})
	// ichido.call.duration (s)
	// ichido.store.duration (s)
}
