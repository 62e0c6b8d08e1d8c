package otelidem_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
)

// TestFailuresAreErrorsWithTheirClassOnly: a failed call's span has the
// Error status, described by the failure's class and nothing else (no
// error text, no SQL, no address); its store calls' events and the
// metrics carry the class as error.type.
func TestFailuresAreErrorsWithTheirClassOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		store   idemstore.Store
		handler error
		outcome string
		class   string
		events  []string
		failed  string // the event that carries the class ("": none)
	}{
		{"handler error", memstore.New(), errors.New("card declined"), "released", "handler", []string{"ichido.store.claim", "ichido.store.release"}, ""},
		{"store down", storekit.FailingStore{}, nil, "store_error", "transient", nil, "ichido.store.claim"},
		{"store misconfigured", storekit.FailingStore{Permanent: true}, nil, "store_error", "permanent", nil, "ichido.store.claim"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tm := newTelemetry(t, sdktrace.AlwaysSample())
			req := newRequest()
			charge, err := idempotency.Function(func(context.Context, order) (receipt, error) {
				return receipt{Order: "o-1"}, tc.handler
			}, idempotency.FunctionConfig[order]{
				Store:    tc.store,
				Name:     functionName,
				Key:      func(_ context.Context, in order) (string, error) { return in.Key, nil },
				Scope:    func(_ context.Context, in order) (string, error) { return in.Subject, nil },
				Settings: quiet(idempotency.Settings{Observer: tm.observer(), FinishTimeout: 200 * time.Millisecond}),
			})
			require.NoError(t, err)
			_, err = charge(context.Background(), order{Key: req.key, Subject: req.subject})
			require.Error(t, err)

			spans := tm.ended()
			require.Len(t, spans, 1)
			s := spans[0]
			require.Equal(t, codes.Error, s.Status().Code)
			require.Equal(t, tc.class, s.Status().Description)
			a := attrs(s.Attributes())
			require.Equal(t, tc.outcome, a["ichido.outcome"])
			require.Equal(t, tc.class, a["error.type"])
			if tc.events != nil {
				require.Equal(t, tc.events, eventNames(s))
			}
			if tc.failed != "" {
				e := s.Events()[0]
				require.Equal(t, tc.failed, e.Name)
				require.Equal(t, tc.class, attrs(e.Attributes)["error.type"])
			}

			m := tm.metrics(t)
			require.Equal(t, map[string]int64{tc.outcome: 1}, counts(t, m["ichido.calls"]))
			for _, p := range histogram(t, m["ichido.call.duration"]) {
				class, _ := p.Attributes.Value("error.type")
				require.Equal(t, tc.class, class.AsString())
			}
			if tc.failed != "" {
				for _, p := range histogram(t, m["ichido.store.duration"]) {
					class, _ := p.Attributes.Value("error.type")
					require.Equal(t, tc.class, class.AsString())
				}
			}
			requireNothingOf(t, tm, append(req.secrets(), "connection refused", "10.0.0.7", "declined")...)
		})
	}
}

// TestWaitedAndCachedReplays: a duplicate that waited for the first run's
// answer says so, and how long, with its polls as events; a replay from
// the local cache says so and makes no store call. Both link to the run.
func TestWaitedAndCachedReplays(t *testing.T) {
	t.Parallel()
	tm := newTelemetry(t, sdktrace.AlwaysSample())
	req := newRequest()
	started, finish := make(chan struct{}), make(chan struct{})
	charge, err := idempotency.Function(func(ctx context.Context, _ order) (receipt, error) {
		close(started)
		<-finish
		return receipt{Order: "o-1"}, nil
	}, idempotency.FunctionConfig[order]{
		Store: memstore.New(),
		Name:  functionName,
		Key:   func(_ context.Context, in order) (string, error) { return in.Key, nil },
		Settings: quiet(idempotency.Settings{
			Observer:      tm.observer(),
			WaitForResult: 5 * time.Second,
			LocalCache:    &idempotency.LocalCache{},
		}),
	})
	require.NoError(t, err)
	in := order{Key: req.key}
	done := make(chan error)
	go func() { _, err := charge(context.Background(), in); done <- err }()
	<-started
	go func() { _, err := charge(context.Background(), in); done <- err }()
	time.Sleep(100 * time.Millisecond) // the duplicate polls meanwhile
	close(finish)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	_, err = charge(context.Background(), in) // from the local cache
	require.NoError(t, err)

	spans := tm.ended()
	require.Len(t, spans, 3)
	run, waited, cached := spans[0], spans[1], spans[2]
	require.Equal(t, "completed", attrs(run.Attributes())["ichido.outcome"])

	a := attrs(waited.Attributes())
	require.Equal(t, "replayed", a["ichido.outcome"])
	require.Equal(t, true, a["ichido.waited"])
	require.Greater(t, a["ichido.wait.duration"], 0.05)
	require.Contains(t, eventNames(waited), "ichido.store.wait")
	require.Len(t, waited.Links(), 1)
	require.Equal(t, run.SpanContext().SpanID(), waited.Links()[0].SpanContext.SpanID())

	a = attrs(cached.Attributes())
	require.Equal(t, "replayed", a["ichido.outcome"])
	require.Equal(t, true, a["ichido.cached"])
	require.Empty(t, cached.Events(), "no store call")
	require.Len(t, cached.Links(), 1)
	require.Equal(t, run.SpanContext().SpanID(), cached.Links()[0].SpanContext.SpanID())

	m := tm.metrics(t)
	require.Equal(t, map[string]int64{"completed": 1, "replayed": 2}, counts(t, m["ichido.calls"]))
}

// TestUnsampledRunsLeaveNoOrigin: a run whose span is not sampled keeps no
// origin, so a replay (traced or not) has no link to a span nobody has;
// its metrics are recorded all the same.
func TestUnsampledRunsLeaveNoOrigin(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	unsampled, sampled := newTelemetry(t, sdktrace.NeverSample()), newTelemetry(t, sdktrace.AlwaysSample())
	req := newRequest()
	r := &runs{}
	openWrap(t, unsampled, store, req, r)(t)
	openWrap(t, sampled, store, req, r)(t)
	require.EqualValues(t, 1, r.n.Load())

	require.Empty(t, unsampled.ended())
	require.Equal(t, map[string]int64{"completed": 1}, counts(t, unsampled.metrics(t)["ichido.calls"]))
	spans := sampled.ended()
	require.Len(t, spans, 1)
	require.Equal(t, "replayed", attrs(spans[0].Attributes())["ichido.outcome"])
	require.Empty(t, spans[0].Links())
	require.NotContains(t, attrs(spans[0].Attributes()), "ichido.origin.time")
}

// TestOriginIsTheCallsOwnSpan: Origin names the call's span, never the
// parent it was started under; a no-op tracer's span, which carries its
// parent's ids, has none.
func TestOriginIsTheCallsOwnSpan(t *testing.T) {
	t.Parallel()
	parent := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID:    trace.TraceID{0x0a, 0xf7, 0x65, 0x19, 0x16, 0xcd, 0x43, 0xdd, 0x84, 0x48, 0xeb, 0x21, 0x1c, 0x80, 0x31, 0x9c},
		SpanID:     trace.SpanID{0xb7, 0xad, 0x6b, 0x71, 0x69, 0x20, 0x33, 0x31},
		TraceFlags: trace.FlagsSampled,
		Remote:     true,
	})
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), parent)
	call := observe.Call{Shape: observe.ShapeHTTP, Method: http.MethodPost, Store: "memstore"}

	noop := otelidem.New(otelidem.WithTracerProvider(tracenoop.NewTracerProvider()), otelidem.WithMeterProvider(metricnoop.NewMeterProvider()))
	_, span := noop.Start(ctx, call)
	require.Nil(t, span.Origin())
	span.End(observe.Result{Outcome: "completed", Status: http.StatusCreated, Claimed: true})

	tm := newTelemetry(t, sdktrace.ParentBased(sdktrace.AlwaysSample()))
	inner, span := tm.observer().Start(ctx, call)
	o := span.Origin()
	require.NotNil(t, o)
	own := trace.SpanContextFromContext(inner)
	require.Equal(t, parent.TraceID().String(), o.TraceID)
	require.Equal(t, own.SpanID().String(), o.SpanID)
	require.NotEqual(t, parent.SpanID().String(), o.SpanID)
	span.End(observe.Result{Outcome: "completed", Status: http.StatusCreated, Claimed: true})
	require.Equal(t, parent.SpanID(), tm.ended()[0].Parent().SpanID())
}

// TestGlobalProviders: with no providers given, New reports to the global
// ones, even when they are set after it.
func TestGlobalProviders(t *testing.T) {
	obs := otelidem.New()
	tm := newTelemetry(t, sdktrace.AlwaysSample())
	otel.SetTracerProvider(tm.tp)
	otel.SetMeterProvider(tm.mp)
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated}, nil
	}, idempotency.Config{Store: memstore.New(), Settings: quiet(idempotency.Settings{Observer: obs})})
	require.NoError(t, err)
	req := newRequest()
	ev := events.APIGatewayV2HTTPRequest{RawPath: req.path, Headers: map[string]string{"idempotency-key": req.key}}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": req.subject}},
	}
	_, err = h(context.Background(), ev)
	require.NoError(t, err)
	require.Len(t, tm.ended(), 1)
	require.Equal(t, map[string]int64{"completed": 1}, counts(t, tm.metrics(t)["ichido.calls"]))
}
