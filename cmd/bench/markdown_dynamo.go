package main

import (
	"fmt"
	"sort"
	"strings"
)

// dynamoMarkdown is the report's section on the DynamoDB store.
func (b *bench) dynamoMarkdown() string {
	d := b.res.DynamoDB
	if d == nil {
		return ""
	}
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }
	p("## 6. The DynamoDB store (on an emulator)\n\n")
	p("Package dynamostore against %s, a DynamoDB API server on loopback (package dynamotest). What is measured here is what the store asks of DynamoDB: requests counted on the wire, and capacity both as the server reports it (`ReturnConsumedCapacity: TOTAL`) and as DynamoDB's sizing rules give it from the items' sizes (`dynamostore.ItemSize`: one write unit per KB of the larger of the item before and after, at least one, a failed conditional write included; one read unit per 4 KB for a strongly consistent read). The emulator's latency says nothing of DynamoDB's, so no latency of it is reported; only the decorator's own time, which does not depend on what answers.\n\n", d.Server)
	p("| path | requests per operation | of which | units reported by the emulator | DynamoDB's rule: write units | item (bytes) |\n|---|---|---|---|---|---|\n")
	for _, path := range d.Paths {
		var ops []string
		for op := range path.Requests {
			ops = append(ops, op)
		}
		sort.Strings(ops)
		var parts []string
		for _, op := range ops {
			parts = append(parts, fmt.Sprintf("%s %.2f", op, path.Requests[op]))
		}
		reported := fmt.Sprintf("%.2f", path.ReportedUnits)
		if path.Unreported > 0 {
			reported += fmt.Sprintf(" (%.2f requests, failed conditional writes, report none)", path.Unreported)
		}
		p("| %s | **%.2f** | %s | %s | %.0f | %d |\n", path.Name, path.RequestsPerOp, strings.Join(parts, ", "), reported, path.WriteUnits, path.ItemBytes)
	}
	p("\nA replay is one request, the claim's `PutItem` whose failed condition answers with the record (`ReturnValuesOnConditionCheckFailure: ALL_OLD`), and a first request two. The emulator reports a fixed figure per successful write rather than DynamoDB's per-size one, and nothing for a failed conditional write; DynamoDB's own rule is the column to budget by (docs/cost.md).\n\n")
	if len(d.Sizes) > 0 {
		p("What a replay costs as the stored response grows (DynamoDB's rule; the limit is 400 KB an item):\n\n")
		p("| response body | completed item | replay (failed conditional PutItem) | a strongly consistent GetItem of it, for comparison | first request (PutItem + UpdateItem) |\n|---|---|---|---|---|\n")
		for _, s := range d.Sizes {
			p("| %s | %d bytes | %d WRU | %.0f RRU | %d WRU |\n", kib(s.BodyBytes), s.ItemBytes, s.ReplayWRU, s.ReadRRU, s.FirstWRU)
		}
		p("\nA replay's write units grow with the record; a read would cost a quarter of them in units (and a fifth of the price per unit, docs/cost.md) but a second round trip. `Options.MaxRecordBytes` bounds the record, and so a replay's cost.\n\n")
	}
	if len(d.Sides) > 0 {
		p("The decorator's own time on this store, one client: each operation's time through `idempotency.Wrap` less the time spent inside the store's calls (the key and user checks, the fingerprint, the engine, the log and metric lines; the store's own Go code, the SDK and the round trip are inside the store's calls and left out), medians of %d repetitions:\n\n", len(d.Sides[0].Runs))
		p("| | p50 (ms) | p99 (ms) |\n|---|---|---|\n")
		for _, s := range d.Sides {
			p("| %s | %.3f | %.3f |\n", strings.TrimPrefix(s.Name, "decorator's own time, "), s.P50Ms, s.P99Ms)
		}
		p("\n")
	}
	return w.String()
}

func kib(n int) string {
	if n%1024 == 0 {
		return fmt.Sprintf("%d KiB", n/1024)
	}
	return fmt.Sprintf("%d bytes", n)
}
