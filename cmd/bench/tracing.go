package main

import (
	"bufio"
	"context"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// The otelidem benchmarks the tracing section runs, and their setups in
// the order the report shows them (internal/libtest/otelidem/bench_test.go).
var (
	tracingBenchmarks = []struct{ name, call string }{
		{"BenchmarkFirstCall", "first call"},
		{"BenchmarkReplay", "replay"},
	}
	tracingSetups = []struct{ name, label string }{
		{"unprotected", "without ichido"},
		{"observer=nil", "ichido, Observer nil"},
		{"otelidem=noop", "otelidem, no-op providers"},
		{"otelidem=sdk", "otelidem, SDK recording"},
	}
)

// tracingPackage is the folder of otelidem's benchmarks, with the tests of the
// library that need its servers (module internal/libtest).
const tracingPackage = "internal/libtest/otelidem"

// tracing runs otelidem's benchmarks: a protected call (a new key, and a
// replay from the store) without ichido, with ichido and no Observer, with
// otelidem over no-op providers, and with otelidem over the SDK recording
// every span and metric in memory. The test binary is built once and run
// once per repetition, so that the repetitions are interleaved (every
// setup in each) as the other sections' sides are.
func (b *bench) tracing(ctx context.Context) error {
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return err
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command is not on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "bench-tracing-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "otelidem.test")
	build := exec.CommandContext(ctx, gobin, "test", "-c", "-o", bin, ".")
	build.Dir = filepath.Join(root, tracingPackage)
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building otelidem's benchmarks: %v\n%s", err, out)
	}

	benchtime := time.Second
	if b.cfg.quick {
		benchtime = 100 * time.Millisecond
	}
	var names []string
	for _, bm := range tracingBenchmarks {
		names = append(names, bm.name)
	}
	pattern := "^(" + strings.Join(names, "|") + ")$"
	res := &TracingResult{
		Command:   fmt.Sprintf("go test -run '^$' -bench '%s' -benchmem -benchtime %s ./%s/", pattern, benchtime, tracingPackage),
		Benchtime: benchtime.String(),
	}
	runs := map[string][]benchLine{}
	for i := range b.cfg.reps {
		run := exec.CommandContext(ctx, bin, "-test.run", "^$", "-test.bench", pattern, "-test.benchmem",
			"-test.count", "1", "-test.benchtime", benchtime.String())
		run.Dir = build.Dir
		out, err := run.CombinedOutput()
		if err != nil {
			return fmt.Errorf("repetition %d of otelidem's benchmarks: %v\n%s", i+1, err, out)
		}
		lines, err := parseBenchOutput(string(out))
		if err != nil {
			return fmt.Errorf("repetition %d: %w", i+1, err)
		}
		for _, l := range lines {
			runs[l.name] = append(runs[l.name], l)
		}
	}
	for _, bm := range tracingBenchmarks {
		for _, st := range tracingSetups {
			ls := runs[bm.name+"/"+st.name]
			if len(ls) == 0 {
				return fmt.Errorf("otelidem's benchmarks did not report %s/%s: was it renamed?", bm.name, st.name)
			}
			c := TracingCase{Call: bm.call, Setup: st.label, Benchmark: bm.name + "/" + st.name}
			for _, l := range ls {
				c.NsRuns = append(c.NsRuns, l.nsPerOp)
				c.AllocsRuns = append(c.AllocsRuns, l.allocsPerOp)
				c.BytesRuns = append(c.BytesRuns, l.bytesPerOp)
			}
			c.NsPerOp, c.AllocsPerOp, c.BytesPerOp = median(c.NsRuns), median(c.AllocsRuns), median(c.BytesRuns)
			c.NsIQRPct = relIQR(c.NsRuns)
			log.Printf("  tracing %s, %s: %.0f ns, %.0f allocs, %.0f B per call (spread %.0f%%)", bm.call, st.label, c.NsPerOp, c.AllocsPerOp, c.BytesPerOp, c.NsIQRPct)
			res.Cases = append(res.Cases, c)
		}
	}
	b.res.Tracing = res
	return nil
}

// benchLine is one result line of `go test -bench`.
type benchLine struct {
	name                             string // without the -GOMAXPROCS suffix
	nsPerOp, bytesPerOp, allocsPerOp float64
}

// parseBenchOutput reads the result lines of `go test -bench -benchmem`
// ("BenchmarkReplay/otelidem=sdk-2  123  4567 ns/op  890 B/op  12 allocs/op")
// and skips every other line.
func parseBenchOutput(out string) ([]benchLine, error) {
	var lines []benchLine
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a benchmark's name printed alone, before its result
		}
		l := benchLine{name: f[0]}
		if i := strings.LastIndexByte(l.name, '-'); i > 0 {
			if _, err := strconv.Atoi(l.name[i+1:]); err == nil {
				l.name = l.name[:i]
			}
		}
		seen := 0
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%q: %q is not a number", sc.Text(), f[i])
			}
			switch f[i+1] {
			case "ns/op":
				l.nsPerOp = v
				seen++
			case "B/op":
				l.bytesPerOp = v
				seen++
			case "allocs/op":
				l.allocsPerOp = v
				seen++
			}
		}
		if seen != 3 {
			return nil, fmt.Errorf("%q: expected ns/op, B/op and allocs/op (-benchmem)", sc.Text())
		}
		lines = append(lines, l)
	}
	return lines, sc.Err()
}

// TracingResult is what tracing adds to a protected call: otelidem's
// benchmarks, each setup's median over the repetitions.
type TracingResult struct {
	// Command is the go test line that runs the same benchmarks once.
	Command   string        `json:"command"`
	Benchtime string        `json:"benchtime"`
	Cases     []TracingCase `json:"cases"`
}

// TracingCase is one call (first call or replay) in one setup.
type TracingCase struct {
	Call        string    `json:"call"`
	Setup       string    `json:"setup"`
	Benchmark   string    `json:"benchmark"`
	NsPerOp     float64   `json:"ns_per_op"`
	AllocsPerOp float64   `json:"allocs_per_op"`
	BytesPerOp  float64   `json:"bytes_per_op"`
	NsIQRPct    float64   `json:"ns_iqr_pct"`
	NsRuns      []float64 `json:"ns_runs"`
	AllocsRuns  []float64 `json:"allocs_runs"`
	BytesRuns   []float64 `json:"bytes_runs"`
}
