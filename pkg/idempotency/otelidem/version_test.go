package otelidem

import (
	"context"
	"runtime/debug"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/ichido/ichido/pkg/idempotency/observe"
)

func TestModuleVersion(t *testing.T) {
	t.Parallel()
	dep := func(path, version string) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "example.com/app", Version: "(devel)"}, Deps: []*debug.Module{{Path: path, Version: version}}}
	}
	replaced := dep(ScopeName, "v0.1.0")
	replaced.Deps[0].Replace = &debug.Module{Path: "../otelidem"}
	for _, c := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{dep(ScopeName, "v0.1.0"), "0.1.0"},
		{dep(ScopeName, "(devel)"), "devel"},
		{dep("example.com/other", "v1.0.0"), "devel"},
		{replaced, "devel"},
	} {
		if got := moduleVersion(c.info); got != c.want {
			t.Errorf("moduleVersion of %v = %q, want %q", c.info.Deps[0], got, c.want)
		}
	}
}

func TestSpansCarryTheVersion(t *testing.T) {
	t.Parallel()
	spans := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans))
	_, span := New(WithTracerProvider(tp), WithMeterProvider(nil)).Start(context.Background(), observe.Call{Shape: "function", Function: "f"})
	span.End(observe.Result{Outcome: "completed"})
	ended := spans.GetSpans()
	if len(ended) != 1 {
		t.Fatalf("%d spans ended, want 1", len(ended))
	}
	if got := ended[0].InstrumentationScope; got.Name != ScopeName || got.Version != Version() || got.Version == "" {
		t.Errorf("the span's scope is %q %q, want %q %q", got.Name, got.Version, ScopeName, Version())
	}
}
