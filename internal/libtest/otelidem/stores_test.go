package otelidem_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/ichido/ichido/internal/libtest/storekit"
)

// TestMain stops the servers the tests shared.
func TestMain(m *testing.M) { os.Exit(storekit.Main(m)) }

// TestEveryShapeOnEveryStore: on every store, each shape's first call is
// one internal span with the documented attributes and its store calls as
// events, in whose context the handler runs; its replays, by the same
// handler and by a new one with a new Observer (a cold start), are spans
// linked to the first call's span, a link that comes from the store. The
// metrics count the calls by outcome and time them and their store calls;
// no key, subject, path or body reaches any of it.
func TestEveryShapeOnEveryStore(t *testing.T) {
	t.Parallel()
	for _, b := range storekit.Backends() {
		t.Run(b.Package, func(t *testing.T) {
			t.Parallel()
			for _, sh := range shapes() {
				t.Run(sh.name, func(t *testing.T) {
					t.Parallel()
					tm := newTelemetry(t, sdktrace.AlwaysSample())
					store := b.New(t)
					req := newRequest()
					r := &runs{}

					began := time.Now()
					call := sh.open(t, tm, store, req, r)
					call(t) // the first run
					call(t) // a replay
					sh.open(t, tm, store, req, r)(t)
					require.EqualValues(t, 1, r.n.Load(), "the handler ran once")

					spans := tm.ended()
					require.Len(t, spans, 3, "one span per call")
					first := spans[0]
					requireCallSpan(t, sh, b.Package, first)
					a := attrs(first.Attributes())
					require.Equal(t, "completed", a["ichido.outcome"])
					require.Equal(t, true, a["ichido.claimed"])
					require.Equal(t, false, a["ichido.replayed"])
					require.NotContains(t, a, "ichido.origin.time")
					require.Equal(t, []string{"ichido.store.claim", "ichido.store.complete"}, eventNames(first))
					require.Empty(t, first.Links())
					require.Equal(t, first.SpanContext(), r.first().span, "the handler runs in the call's span")
					if sh.server {
						require.True(t, first.Parent().IsValid(), "the call's span is the server span's child")
						require.Equal(t, first.SpanContext().TraceID(), first.Parent().TraceID())
					} else {
						require.False(t, first.Parent().IsValid())
					}

					for i, replay := range spans[1:] {
						requireCallSpan(t, sh, b.Package, replay)
						a := attrs(replay.Attributes())
						require.Equal(t, "replayed", a["ichido.outcome"], "call %d", i+2)
						require.Equal(t, false, a["ichido.claimed"])
						require.Equal(t, true, a["ichido.replayed"])
						require.Equal(t, []string{"ichido.store.claim"}, eventNames(replay))
						require.Len(t, replay.Links(), 1, "call %d: a replay links to the run that produced its answer (the store must keep Response.Origin)", i+2)
						link := replay.Links()[0].SpanContext
						require.Equal(t, first.SpanContext().TraceID(), link.TraceID())
						require.Equal(t, first.SpanContext().SpanID(), link.SpanID())
						require.True(t, link.IsRemote())
						at, err := time.Parse(time.RFC3339Nano, a["ichido.origin.time"].(string))
						require.NoError(t, err)
						require.WithinRange(t, at, began.Add(-time.Second), replay.StartTime().Add(time.Second))
					}

					m := tm.metrics(t)
					require.Equal(t, map[string]int64{"completed": 1, "replayed": 2}, counts(t, m["ichido.calls"]))
					var n uint64
					for _, dp := range histogram(t, m["ichido.call.duration"]) {
						n += dp.Count
						requireMetricAttrs(t, sh, b.Package, dp.Attributes)
					}
					require.EqualValues(t, 3, n)
					ops := map[string]uint64{}
					for _, dp := range histogram(t, m["ichido.store.duration"]) {
						op, _ := dp.Attributes.Value("ichido.store.operation")
						store, _ := dp.Attributes.Value("ichido.store.name")
						require.Equal(t, b.Package, store.AsString())
						ops[op.AsString()] += dp.Count
					}
					require.Equal(t, map[string]uint64{"claim": 3, "complete": 1}, ops)
					requireNothingOf(t, tm, req.secrets()...)
				})
			}
		})
	}
}

// requireCallSpan checks what every span of sh on store has.
func requireCallSpan(t *testing.T, sh shape, store string, s sdktrace.ReadOnlySpan) {
	t.Helper()
	require.Equal(t, sh.spanName, s.Name())
	require.Equal(t, trace.SpanKindInternal, s.SpanKind())
	require.Equal(t, codes.Unset, s.Status().Code)
	a := attrs(s.Attributes())
	for k, v := range sh.start {
		require.Equal(t, v, a[k], k)
	}
	require.Equal(t, store, a["ichido.store.name"])
	for _, k := range []string{"ichido.cached", "ichido.waited", "ichido.heartbeat"} {
		require.IsType(t, false, a[k], k)
	}
	require.Equal(t, false, a["ichido.cached"])
	require.Equal(t, false, a["ichido.waited"])
	if sh.status != 0 {
		require.EqualValues(t, sh.status, a["http.response.status_code"])
	} else {
		require.NotContains(t, a, "http.response.status_code")
	}
	for _, e := range s.Events() {
		d := attrs(e.Attributes)
		require.GreaterOrEqual(t, d["ichido.store.duration"], 0.0, e.Name)
		require.NotContains(t, d, "error.type")
	}
	for k := range a {
		require.NotContains(t, []string{"url.path", "url.full", "http.route", "messaging.message.id"}, k)
	}
}

// requireMetricAttrs checks a call's measurement attributes: the
// documented ones, and bounded.
func requireMetricAttrs(t *testing.T, sh shape, store string, set attribute.Set) {
	t.Helper()
	a := attrs(set.ToSlice())
	for k := range a {
		require.Contains(t, []string{
			"ichido.shape", "ichido.store.name", "ichido.function", "http.request.method",
			"ichido.outcome", "ichido.claimed", "ichido.cached", "ichido.waited", "error.type",
		}, k)
	}
	require.Equal(t, sh.start["ichido.shape"], a["ichido.shape"])
	require.Equal(t, sh.start["ichido.function"], a["ichido.function"])
	require.Equal(t, sh.start["http.request.method"], a["http.request.method"])
	require.Equal(t, store, a["ichido.store.name"])
}
