package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
)

// tracesVariable turns the idempotency spans on: "stdout" prints each span,
// as indented JSON, on standard error as it ends; empty or "off" prints none.
const tracesVariable = "ICHIDO_TRACES"

// serviceName is the resource's service.name on the printed spans.
const serviceName = "ichido-localapi"

// traces returns the Observer that ICHIDO_TRACES asks for (nil for none)
// and a function that flushes and stops its tracer provider.
//
// Spans go to standard error, between the access log lines of their
// requests, and never to standard output, where the functions' JSON log
// lines are. Every span is sampled and exported as it ends (no batching),
// so that a request's span is printed before its answer is read. Metrics
// are not exported: the functions' EMF lines carry them.
func traces(getenv func(string) string, stderr io.Writer) (observe.Observer, func(context.Context) error, error) {
	v := strings.TrimSpace(getenv(tracesVariable))
	switch strings.ToLower(v) {
	case "", "off":
		return nil, func(context.Context) error { return nil }, nil
	case "stdout":
		exp, err := stdouttrace.New(stdouttrace.WithWriter(stderr), stdouttrace.WithPrettyPrint())
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", tracesVariable, err)
		}
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithSyncer(exp),
			sdktrace.WithSampler(sdktrace.AlwaysSample()),
			sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", serviceName))),
		)
		obs := otelidem.New(otelidem.WithTracerProvider(tp), otelidem.WithMeterProvider(metricnoop.NewMeterProvider()))
		return obs, tp.Shutdown, nil
	default:
		return nil, nil, fmt.Errorf("%s is %q: set it to stdout to print the idempotency spans on standard error, or leave it empty", tracesVariable, v)
	}
}
