package otelidem

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// span is the observe.Span of one protected call. Its fields are set by
// Start and only read after, since StoreCall may come from another
// goroutine (a heartbeat's renewals).
type span struct {
	o      *observer
	span   trace.Span
	ctx    context.Context // the call's, for the measurements' exemplars
	call   observe.Call
	method string // call.Method as the semantic conventions name it
	start  time.Time
}

// Origin returns the span's ids when it is recorded and sampled, so that a
// replay's link points at a span the tracing backend has.
func (s *span) Origin() *idemstore.Origin {
	if !s.span.IsRecording() {
		return nil
	}
	sc := s.span.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() {
		return nil
	}
	return &idemstore.Origin{TraceID: sc.TraceID().String(), SpanID: sc.SpanID().String()}
}

// StoreCall adds an event at the store call's start to the span, and
// records its duration.
func (s *span) StoreCall(op string, start time.Time, d time.Duration, class string) {
	if s.span.IsRecording() {
		attrs := make([]attribute.KeyValue, 1, 2)
		attrs[0] = attrStoreDuration.Float64(d.Seconds())
		if class != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(class))
		}
		s.span.AddEvent(eventName(op), trace.WithTimestamp(start), trace.WithAttributes(attrs...))
	}
	if s.o.storeDuration.Enabled(s.ctx) {
		s.o.storeDuration.Record(s.ctx, d.Seconds(), s.o.measurement(setKey{store: s.call.Store, op: op, class: class}))
	}
}

// eventName is the name of a store call's event.
func eventName(op string) string {
	switch op {
	case "claim":
		return "ichido.store.claim"
	case "complete":
		return "ichido.store.complete"
	case "release":
		return "ichido.store.release"
	case "renew":
		return "ichido.store.renew"
	case "wait":
		return "ichido.store.wait"
	case "get":
		return "ichido.store.get"
	}
	return "ichido.store." + op
}

// End sets the result's attributes, links a replay to its origin, and ends
// the span; then counts the call and records its duration.
func (s *span) End(r observe.Result) {
	d := time.Since(s.start)
	if s.span.IsRecording() {
		attrs := make([]attribute.KeyValue, 0, 10)
		attrs = append(attrs,
			attrOutcome.String(r.Outcome),
			attrClaimed.Bool(r.Claimed),
			attrReplayed.Bool(r.Replayed),
			attrCached.Bool(r.Cached),
			attrWaited.Bool(r.Waited),
			attrHeartbeat.Bool(r.Heartbeat),
			attrRetried.Bool(r.Retried))
		if r.Waited {
			attrs = append(attrs, attrWaitDuration.Float64(r.WaitedFor.Seconds()))
		}
		if r.Status != 0 {
			attrs = append(attrs, semconv.HTTPResponseStatusCode(r.Status))
		}
		if r.ErrorClass != "" {
			attrs = append(attrs, semconv.ErrorTypeKey.String(r.ErrorClass))
		}
		if link, ok := originLink(r.Origin); ok {
			s.span.AddLink(link)
			attrs = append(attrs, attrOriginTime.String(r.Origin.At.UTC().Format(time.RFC3339Nano)))
		}
		s.span.SetAttributes(attrs...)
		if r.ErrorClass != "" {
			s.span.SetStatus(codes.Error, r.ErrorClass)
		}
	}
	s.span.End()

	if s.o.calls.Enabled(s.ctx) || s.o.callDuration.Enabled(s.ctx) {
		opt := s.o.measurement(setKey{
			shape: s.call.Shape, store: s.call.Store, function: s.call.Function, method: s.method,
			outcome: r.Outcome, class: r.ErrorClass,
			claimed: r.Claimed, cached: r.Cached, waited: r.Waited,
		})
		s.o.calls.Add(s.ctx, 1, opt)
		s.o.callDuration.Record(s.ctx, d.Seconds(), opt)
	}
}

// originLink is the link from a replay to the span of the run that
// produced its answer; ok is false when there is none or its ids are not
// valid.
func originLink(o *idemstore.Origin) (trace.Link, bool) {
	if o == nil {
		return trace.Link{}, false
	}
	tid, err := trace.TraceIDFromHex(o.TraceID)
	if err != nil {
		return trace.Link{}, false
	}
	sid, err := trace.SpanIDFromHex(o.SpanID)
	if err != nil {
		return trace.Link{}, false
	}
	// Origin only keeps sampled spans' ids (span.Origin).
	return trace.Link{SpanContext: trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled, Remote: true,
	})}, true
}
