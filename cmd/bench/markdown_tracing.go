package main

import (
	"fmt"
	"strings"
)

// tracingMarkdown is the report's section on what tracing costs.
func (b *bench) tracingMarkdown() string {
	t := b.res.Tracing
	if t == nil {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("## 7. What tracing costs (OpenTelemetry)\n\n")
	p("The benchmarks of package otelidem, as `%s` runs them: an HTTP API POST through `idempotency.Wrap` with the in-memory store (package memstore) and a handler that does nothing, its JSON log and EMF lines formatted and discarded. *first call* is a new key (claim, run, complete); *replay* repeats a completed key. The setups: the handler *without ichido*; ichido with *Observer nil* (no tracing); ichido with `otelidem.New` over *no-op providers* (the OpenTelemetry API with no SDK installed); and over the *SDK recording* every span (always sampled, exported synchronously to memory) and metric (a manual reader). The test binary is built once and run %d times, every setup in each run (`-benchtime %s`); the table gives the median of the runs, the per-run values and the spread (interquartile range over the median). With no store round trip, this is tracing's cost against the decorator's own CPU time, the most it can weigh: a real store adds its round trip (section 1) to every column.\n\n",
		t.Command, b.res.Reps, t.Benchtime)
	p("| call | setup | ns per call | vs Observer nil | added ns vs Observer nil | allocations per call | added | bytes per call | spread (ns) | ns per run | allocations per run |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, c := range t.Cases {
		base := tracingCase(t, c.Call, "observer=nil")
		vs, added, addedAllocs := "—", "—", "—"
		if base != nil && c.Benchmark != base.Benchmark && !strings.HasSuffix(c.Benchmark, "/unprotected") {
			vs = fx(ratio(c.NsPerOp, base.NsPerOp))
			added = fmt.Sprintf("%+.0f", c.NsPerOp-base.NsPerOp)
			addedAllocs = fmt.Sprintf("%+.0f", c.AllocsPerOp-base.AllocsPerOp)
		}
		p("| %s | %s | %.0f | %s | %s | %.0f | %s | %.0f | %.0f%% | %s | %s |\n", c.Call, c.Setup, c.NsPerOp, vs, added, c.AllocsPerOp, addedAllocs, c.BytesPerOp, c.NsIQRPct,
			joinFormat(c.NsRuns, "%.0f"), joinFormat(c.AllocsRuns, "%.0f"))
	}
	p("\n")
	return w.String()
}

// tracingCase is the case of call measured by the benchmark whose setup is
// setup, or nil.
func tracingCase(t *TracingResult, call, setup string) *TracingCase {
	for i := range t.Cases {
		if t.Cases[i].Call == call && strings.HasSuffix(t.Cases[i].Benchmark, "/"+setup) {
			return &t.Cases[i]
		}
	}
	return nil
}

func joinFormat(xs []float64, format string) string {
	var ss []string
	for _, x := range xs {
		ss = append(ss, fmt.Sprintf(format, x))
	}
	return strings.Join(ss, ", ")
}
