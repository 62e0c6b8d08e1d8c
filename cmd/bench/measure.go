package main

import (
	"context"
	"fmt"
	"log"
	"sync"
	"sync/atomic"
	"time"
)

// op is one measured operation of a load loop. It prepares its input, times
// only the part under test and returns that latency. worker is the index of
// the client running it.
type op func(ctx context.Context, worker int) (time.Duration, error)

// Run is one repetition of one measurement: a load loop of Clients
// concurrent clients, bounded by a duration and an operation count.
type Run struct {
	Clients    int     `json:"clients"`
	Ops        int     `json:"ops"`
	Errors     int     `json:"errors"`
	FirstError string  `json:"first_error,omitempty"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"ops_per_s"`
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	MaxMs      float64 `json:"max_ms"`
	// latencies (ms) in completion order, kept for plots only.
	latencies []float64
	// offsets are when each operation ended, since the run started.
	offsets []float64
}

// maxConsecutiveErrors stops a client whose operations keep failing, so
// that a broken side ends its run quickly instead of spinning.
const maxConsecutiveErrors = 50

// load runs op on clients concurrent clients until dur has passed or maxOps
// operations were started, whichever comes first.
func load(ctx context.Context, clients int, dur time.Duration, maxOps int, f op) Run {
	deadline := time.Now().Add(dur)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(30*time.Second))
	defer cancel()
	return loadWhile(ctx, clients, maxOps, f, func() bool { return time.Now().Before(deadline) })
}

// loadWhile runs op on clients concurrent clients while more() holds and
// fewer than maxOps operations were started.
func loadWhile(ctx context.Context, clients, maxOps int, f op, more func() bool) Run {
	type result struct {
		lat, off []float64
		errs     int
		firstErr error
	}
	results := make([]result, clients)
	var started atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := &results[w]
			consecutive := 0
			for ctx.Err() == nil && more() && started.Add(1) <= int64(maxOps) {
				d, err := f(ctx, w)
				if err != nil {
					r.errs++
					if r.firstErr == nil {
						r.firstErr = err
					}
					if consecutive++; consecutive >= maxConsecutiveErrors {
						return
					}
					continue
				}
				consecutive = 0
				r.lat = append(r.lat, ms(d))
				r.off = append(r.off, time.Since(start).Seconds())
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	run := Run{Clients: clients, Seconds: elapsed.Seconds()}
	for _, r := range results {
		run.latencies = append(run.latencies, r.lat...)
		run.offsets = append(run.offsets, r.off...)
		run.Errors += r.errs
		if r.firstErr != nil && run.FirstError == "" {
			run.FirstError = r.firstErr.Error()
		}
	}
	run.Ops = len(run.latencies)
	run.Throughput = float64(run.Ops) / elapsed.Seconds()
	run.P50Ms = quantile(run.latencies, 0.50)
	run.P99Ms = quantile(run.latencies, 0.99)
	run.MaxMs = quantile(run.latencies, 1)
	return run
}

// Side is one side of a comparison: its repetitions and their medians.
type Side struct {
	Name string `json:"name"`
	Runs []Run  `json:"runs"`
	// Medians over the repetitions of each repetition's figure.
	P50Ms      float64 `json:"p50_ms"`
	P99Ms      float64 `json:"p99_ms"`
	Throughput float64 `json:"ops_per_s"`
	// Spread of the repetitions: interquartile range over median, percent.
	P50IQRPct        float64 `json:"p50_iqr_pct"`
	P99IQRPct        float64 `json:"p99_iqr_pct"`
	ThroughputIQRPct float64 `json:"ops_per_s_iqr_pct"`
	Errors           int     `json:"errors"`
}

func (s *Side) summarise() {
	var p50, p99, tput []float64
	s.Errors = 0
	for _, r := range s.Runs {
		p50 = append(p50, r.P50Ms)
		p99 = append(p99, r.P99Ms)
		tput = append(tput, r.Throughput)
		s.Errors += r.Errors
	}
	s.P50Ms, s.P99Ms, s.Throughput = median(p50), median(p99), median(tput)
	s.P50IQRPct, s.P99IQRPct, s.ThroughputIQRPct = relIQR(p50), relIQR(p99), relIQR(tput)
}

// sideSpec names an operation to compare.
type sideSpec struct {
	name string
	op   op
}

// plan bounds the load loops of one comparison.
type plan struct {
	reps    int
	clients int
	dur     time.Duration
	maxOps  int
	warm    time.Duration
}

// compare measures every side p.reps times, interleaved so that drift of the
// machine hits all sides alike: the order is reversed on every other
// repetition (A B, B A, A B, …). Each side is warmed up once first.
func compare(ctx context.Context, p plan, specs []sideSpec) ([]Side, error) {
	sides := make([]Side, len(specs))
	for i, s := range specs {
		sides[i].Name = s.name
		if p.warm > 0 {
			w := load(ctx, p.clients, p.warm, p.maxOps, s.op)
			if w.Ops == 0 && w.Errors > 0 {
				return nil, fmt.Errorf("%s: %s", s.name, w.FirstError)
			}
		}
	}
	for rep := range p.reps {
		order := make([]int, len(specs))
		for i := range order {
			order[i] = i
			if rep%2 == 1 {
				order[i] = len(specs) - 1 - i
			}
		}
		for _, i := range order {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			sides[i].Runs = append(sides[i].Runs, load(ctx, p.clients, p.dur, p.maxOps, specs[i].op))
		}
	}
	for i := range sides {
		sides[i].summarise()
	}
	return sides, nil
}

// timed times f.
func timed(f func() error) (time.Duration, error) {
	start := time.Now()
	err := f()
	return time.Since(start), err
}

func logSides(what string, sides []Side) {
	for _, s := range sides {
		log.Printf("  %s %-24s p50 %7.3f ms  p99 %7.3f ms  %9.1f ops/s  (p50 IQR %.0f%%, %d errors)",
			what, s.Name, s.P50Ms, s.P99Ms, s.Throughput, s.P50IQRPct, s.Errors)
		if s.Errors > 0 {
			for _, r := range s.Runs {
				if r.FirstError != "" {
					log.Printf("    first error: %s", r.FirstError)
					break
				}
			}
		}
	}
}

// compareInTurn measures the sides of a comparison op by op, one client:
// each turn runs every side once (the order rotating from turn to turn), so
// that whatever state the machine is in (a core asleep, a neighbour's load)
// every side meets it in the same moment, not in runs seconds apart. A ratio
// between two sides of one repetition then compares like with like. Each
// repetition lasts p.dur for each side (or p.maxOps turns); a side's Seconds and
// Throughput are those of its own calls. Sides are warmed up together first.
func compareInTurn(ctx context.Context, p plan, specs []sideSpec) ([]Side, error) {
	turns := func(dur time.Duration) ([]Run, error) {
		runs := make([]Run, len(specs))
		consecutive := make([]int, len(specs))
		deadline := time.Now().Add(dur)
		for turn := 0; turn < p.maxOps && time.Now().Before(deadline); turn++ {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			for j := range specs {
				i := (turn + j) % len(specs)
				r := &runs[i]
				d, err := specs[i].op(ctx, 0)
				if err != nil {
					r.Errors++
					if r.FirstError == "" {
						r.FirstError = err.Error()
					}
					if consecutive[i]++; consecutive[i] >= maxConsecutiveErrors {
						return nil, fmt.Errorf("%s: %s", specs[i].name, r.FirstError)
					}
					continue
				}
				consecutive[i] = 0
				r.Seconds += d.Seconds()
				r.latencies = append(r.latencies, ms(d))
				r.offsets = append(r.offsets, r.Seconds)
			}
		}
		for i := range runs {
			r := &runs[i]
			r.Clients, r.Ops = 1, len(r.latencies)
			if r.Seconds > 0 {
				r.Throughput = float64(r.Ops) / r.Seconds
			}
			r.P50Ms, r.P99Ms, r.MaxMs = quantile(r.latencies, 0.50), quantile(r.latencies, 0.99), quantile(r.latencies, 1)
		}
		return runs, nil
	}
	if p.warm > 0 {
		if _, err := turns(p.warm); err != nil {
			return nil, err
		}
	}
	sides := make([]Side, len(specs))
	for i, s := range specs {
		sides[i].Name = s.name
	}
	for range p.reps {
		runs, err := turns(p.dur * time.Duration(len(specs)))
		if err != nil {
			return nil, err
		}
		for i := range sides {
			sides[i].Runs = append(sides[i].Runs, runs[i])
		}
	}
	for i := range sides {
		sides[i].summarise()
	}
	return sides, nil
}
