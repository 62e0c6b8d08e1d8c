package otelidem_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
)

// telemetry is an OpenTelemetry SDK that keeps what it is given in memory:
// every ended span, and the metrics a manual reader collects.
type telemetry struct {
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
}

func newTelemetry(t *testing.T, sampler sdktrace.Sampler) *telemetry {
	tm := &telemetry{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tm.tp = sdktrace.NewTracerProvider(sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(tm.spans))
	tm.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(tm.reader))
	t.Cleanup(func() {
		_ = tm.tp.Shutdown(context.Background())
		_ = tm.mp.Shutdown(context.Background())
	})
	return tm
}

// observer is a new Observer on the SDK, as a cold start makes one.
func (tm *telemetry) observer() observe.Observer {
	return otelidem.New(otelidem.WithTracerProvider(tm.tp), otelidem.WithMeterProvider(tm.mp))
}

// ended are the ended spans of otelidem, in the order they ended.
func (tm *telemetry) ended() []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.InstrumentationScope().Name == otelidem.ScopeName {
			out = append(out, s)
		}
	}
	return out
}

// metrics collects the metrics of otelidem by name.
func (tm *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != otelidem.ScopeName {
			continue
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs maps attributes' keys to their values.
func attrs(kvs []attribute.KeyValue) map[string]any {
	out := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		out[string(kv.Key)] = kv.Value.AsInterface()
	}
	return out
}

// eventNames are the names of a span's events.
func eventNames(s sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, e := range s.Events() {
		out = append(out, e.Name)
	}
	return out
}

// counts are the values of the ichido.calls data points by outcome.
func counts(t *testing.T, m metricdata.Metrics) map[string]int64 {
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.True(t, ok, "%s is a sum of int64, got %T", m.Name, m.Data)
	require.True(t, sum.IsMonotonic)
	out := map[string]int64{}
	for _, dp := range sum.DataPoints {
		outcome, _ := dp.Attributes.Value("ichido.outcome")
		out[outcome.AsString()] += dp.Value
	}
	return out
}

// histogram are the data points of a histogram of float64.
func histogram(t *testing.T, m metricdata.Metrics) []metricdata.HistogramDataPoint[float64] {
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.True(t, ok, "%s is a histogram of float64, got %T", m.Name, m.Data)
	return h.DataPoints
}

// requireNothingOf fails when any text of the spans or metrics (a name,
// an attribute of a span, event or link, a status, a data point's
// attribute) contains any of secrets.
func requireNothingOf(t *testing.T, tm *telemetry, secrets ...string) {
	t.Helper()
	var texts []string
	addAttrs := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			texts = append(texts, string(kv.Key), kv.Value.String())
		}
	}
	for _, s := range tm.spans.Ended() {
		texts = append(texts, s.Name(), s.Status().Description)
		addAttrs(s.Attributes())
		for _, e := range s.Events() {
			texts = append(texts, e.Name)
			addAttrs(e.Attributes)
		}
		for _, l := range s.Links() {
			addAttrs(l.Attributes)
		}
	}
	var rm metricdata.ResourceMetrics
	require.NoError(t, tm.reader.Collect(context.Background(), &rm))
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			texts = append(texts, m.Name, m.Description, m.Unit)
			switch data := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range data.DataPoints {
					addAttrs(dp.Attributes.ToSlice())
				}
			case metricdata.Histogram[float64]:
				for _, dp := range data.DataPoints {
					addAttrs(dp.Attributes.ToSlice())
				}
			default:
				t.Fatalf("metric %s: unexpected data %T", m.Name, m.Data)
			}
		}
	}
	require.NotEmpty(t, texts)
	for _, text := range texts {
		for _, secret := range secrets {
			require.NotContains(t, strings.ToLower(text), strings.ToLower(secret), "a span or metric carries a key, subject, path or body")
		}
	}
}

// quiet turns the log and EMF lines off.
func quiet(s idempotency.Settings) idempotency.Settings {
	s.Logger, s.Metrics = slog.New(slog.NewJSONHandler(io.Discard, nil)), io.Discard
	return s
}
