package otelidem

import (
	"context"
	"net/http"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// ScopeName is the instrumentation scope of the tracer and the meter.
const ScopeName = "github.com/ichido/ichido/pkg/idempotency/otelidem"

// Names of the attributes ichido adds. Attributes of OpenTelemetry's
// semantic conventions (http.request.method, error.type, ...) come from
// package semconv.
const (
	attrShape          = attribute.Key("ichido.shape")
	attrStoreName      = attribute.Key("ichido.store.name")
	attrStoreOperation = attribute.Key("ichido.store.operation")
	attrStoreDuration  = attribute.Key("ichido.store.duration")
	attrFunction       = attribute.Key("ichido.function")
	attrOutcome        = attribute.Key("ichido.outcome")
	attrClaimed        = attribute.Key("ichido.claimed")
	attrReplayed       = attribute.Key("ichido.replayed")
	attrCached         = attribute.Key("ichido.cached")
	attrWaited         = attribute.Key("ichido.waited")
	attrWaitDuration   = attribute.Key("ichido.wait.duration")
	attrHeartbeat      = attribute.Key("ichido.heartbeat")
	attrRetried        = attribute.Key("ichido.store.retried")
	attrOriginTime     = attribute.Key("ichido.origin.time")
)

// Names of the metrics.
const (
	metricCalls         = "ichido.calls"
	metricCallDuration  = "ichido.call.duration"
	metricStoreDuration = "ichido.store.duration"
)

// Bucket boundaries, in seconds. A call's are those the semantic conventions
// advise for HTTP durations. A store call's start lower: a round trip to a
// store in the same region takes a millisecond or two.
var (
	callBuckets  = []float64{0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10}
	storeBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5}
)

// An Option configures New.
type Option interface {
	apply(*config)
}

// config is what the Options set.
type config struct {
	tracerProvider trace.TracerProvider
	meterProvider  metric.MeterProvider
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithTracerProvider sets the provider of the calls' tracer. Without it, or
// with nil, New uses the global provider (otel.GetTracerProvider). That one
// delegates to the provider set with otel.SetTracerProvider, even one set
// after New.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optionFunc(func(c *config) {
		if tp != nil {
			c.tracerProvider = tp
		}
	})
}

// WithMeterProvider sets the provider of the calls' meter. Without it, or
// with nil, New uses the global provider (otel.GetMeterProvider), which
// delegates like the tracer's.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return optionFunc(func(c *config) {
		if mp != nil {
			c.meterProvider = mp
		}
	})
}

// New returns an Observer that makes an OpenTelemetry span and metrics of
// every protected call, for idempotency.Settings.Observer. One Observer
// may serve any number of handlers and stores. Without options, it reports
// to the global providers.
func New(opts ...Option) observe.Observer {
	c := config{tracerProvider: otel.GetTracerProvider(), meterProvider: otel.GetMeterProvider()}
	for _, o := range opts {
		o.apply(&c)
	}
	tp, mp := c.tracerProvider, c.meterProvider
	o := &observer{
		tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(Version()), trace.WithSchemaURL(semconv.SchemaURL)),
		sets:   map[setKey]metric.MeasurementOption{},
	}
	meter := mp.Meter(ScopeName, metric.WithInstrumentationVersion(Version()), metric.WithSchemaURL(semconv.SchemaURL))
	var err error
	// An instrument that cannot be made is handed to the error handler;
	// the one returned still works, as a no-op.
	if o.calls, err = meter.Int64Counter(metricCalls,
		metric.WithUnit("{call}"),
		metric.WithDescription("Protected calls, by what became of them."),
	); err != nil {
		otel.Handle(err)
	}
	if o.callDuration, err = meter.Float64Histogram(metricCallDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of protected calls, store calls and handler included."),
		metric.WithExplicitBucketBoundaries(callBuckets...),
	); err != nil {
		otel.Handle(err)
	}
	if o.storeDuration, err = meter.Float64Histogram(metricStoreDuration,
		metric.WithUnit("s"),
		metric.WithDescription("Duration of the calls made to the idempotency store."),
		metric.WithExplicitBucketBoundaries(storeBuckets...),
	); err != nil {
		otel.Handle(err)
	}
	return o
}

// observer is New's Observer.
type observer struct {
	tracer        trace.Tracer
	calls         metric.Int64Counter
	callDuration  metric.Float64Histogram
	storeDuration metric.Float64Histogram

	// sets caches the attribute sets of the measurements, as options: all
	// their values are bounded, so a program meets few of them, and a cached
	// one costs a call no allocation.
	mu   sync.RWMutex
	sets map[setKey]metric.MeasurementOption
}

// maxSets bounds the cache of attribute sets, should a program name an
// unusual number of functions or stores; past it, sets are built per call.
const maxSets = 4096

// setKey names one attribute set of a measurement. A store call's leaves
// the call's fields other than store empty, and a call's leaves op empty.
type setKey struct {
	shape, store, function, method string
	outcome, class, op             string
	claimed, cached, waited        bool
}

// attrs are the attributes of the measurements named by k.
func (k setKey) attrs() []attribute.KeyValue {
	if k.op != "" {
		a := []attribute.KeyValue{attrStoreName.String(k.store), attrStoreOperation.String(k.op)}
		if k.class != "" {
			a = append(a, semconv.ErrorTypeKey.String(k.class))
		}
		return a
	}
	a := make([]attribute.KeyValue, 0, 9)
	a = append(a, attrShape.String(k.shape), attrStoreName.String(k.store), attrOutcome.String(k.outcome),
		attrClaimed.Bool(k.claimed), attrCached.Bool(k.cached), attrWaited.Bool(k.waited))
	if k.function != "" {
		a = append(a, attrFunction.String(k.function))
	}
	if k.method != "" {
		a = append(a, semconv.HTTPRequestMethodKey.String(k.method))
	}
	if k.class != "" {
		a = append(a, semconv.ErrorTypeKey.String(k.class))
	}
	return a
}

// measurement returns the option that carries k's attributes.
func (o *observer) measurement(k setKey) metric.MeasurementOption {
	o.mu.RLock()
	opt, ok := o.sets[k]
	o.mu.RUnlock()
	if ok {
		return opt
	}
	opt = metric.WithAttributeSet(attribute.NewSet(k.attrs()...))
	o.mu.Lock()
	if len(o.sets) < maxSets {
		o.sets[k] = opt
	}
	o.mu.Unlock()
	return opt
}

// Start starts the call's span, a child of the span in ctx if any.
func (o *observer) Start(ctx context.Context, c observe.Call) (context.Context, observe.Span) {
	s := &span{o: o, call: c, method: method(c.Method), start: time.Now()}
	attrs := make([]attribute.KeyValue, 0, 5)
	attrs = append(attrs, attrShape.String(c.Shape), attrStoreName.String(c.Store))
	switch c.Shape {
	case observe.ShapeHTTP:
		attrs = append(attrs, semconv.HTTPRequestMethodKey.String(s.method))
	case observe.ShapeSQS:
		attrs = append(attrs, semconv.MessagingSystemAWSSQS, semconv.MessagingOperationTypeProcess)
	}
	if c.Function != "" {
		attrs = append(attrs, attrFunction.String(c.Function))
	}
	if c.RPCMethod != "" {
		attrs = append(attrs, semconv.RPCMethodKey.String(c.RPCMethod))
	}
	ctx, s.span = o.tracer.Start(ctx, spanName(c, s.method),
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	s.ctx = ctx
	return ctx, s
}

// spanName is "idempotency" and the call's method (HTTP), its RPC method
// (gRPC, Connect) or its function name.
func spanName(c observe.Call, method string) string {
	if c.Shape == observe.ShapeHTTP {
		switch method {
		case http.MethodPost:
			return "idempotency POST"
		case http.MethodPut:
			return "idempotency PUT"
		case http.MethodPatch:
			return "idempotency PATCH"
		case http.MethodDelete:
			return "idempotency DELETE"
		}
		return "idempotency " + method
	}
	if c.RPCMethod != "" {
		return "idempotency " + c.RPCMethod
	}
	if c.Function == "" {
		return "idempotency " + c.Shape
	}
	return "idempotency " + c.Function
}

// method is an HTTP method as the semantic conventions name it: one of
// the known methods, or "_OTHER".
func method(m string) string {
	switch m {
	case http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete,
		http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	case "":
		return ""
	}
	return "_OTHER"
}
