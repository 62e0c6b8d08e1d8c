package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// loadBefore reads an earlier run's results.json, and the notes beside it
// (the same name with .md instead of .json) that say what changed between
// that run and the code measured now.
func loadBefore(path string) (*Results, string, error) {
	js, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	var r Results
	if err := json.Unmarshal(js, &r); err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	notes, _ := os.ReadFile(strings.TrimSuffix(path, ".json") + ".md")
	return &r, string(notes), nil
}

// figure is one number read from a run's results, or false when the run
// did not measure it.
type figure struct {
	name string
	unit string
	get  func(r *Results) (float64, bool)
	// lowerIsBetter decides the word in the change column.
	lowerIsBetter bool
}

func sideFig(get func(r *Results) []Side, name string, f func(s *Side) float64) func(r *Results) (float64, bool) {
	return func(r *Results) (float64, bool) {
		s := side(get(r), name)
		if s == nil {
			return 0, false
		}
		return f(s), true
	}
}

func ratioFig(get func(r *Results) []Side, a, b string, f func(s *Side) float64) func(r *Results) (float64, bool) {
	return func(r *Results) (float64, bool) {
		x, y := side(get(r), a), side(get(r), b)
		if x == nil || y == nil {
			return 0, false
		}
		return ratio(f(x), f(y)), true
	}
}

// sectionSides reads sides from one section of a run: section picks the
// section (nil when the run did not measure it), pick its sides.
func sectionSides[S any](section func(r *Results) *S, pick func(s *S) []Side) func(r *Results) []Side {
	return func(r *Results) []Side {
		if sec := section(r); sec != nil {
			return pick(sec)
		}
		return nil
	}
}

func floorSection(r *Results) *FloorResult     { return r.Floor }
func delaySection(r *Results) *DelayResult     { return r.Delay }
func hotPathSection(r *Results) *HotPathResult { return r.HotPath }

var (
	floorPG    = sectionSides(floorSection, func(f *FloorResult) []Side { return f.Postgres })
	floorRedis = sectionSides(floorSection, func(f *FloorResult) []Side { return f.Redis })
	delayPG    = sectionSides(delaySection, func(d *DelayResult) []Side { return d.Postgres })
	delayRedis = sectionSides(delaySection, func(d *DelayResult) []Side { return d.Redis })
	thr8       = sectionSides(hotPathSection, func(h *HotPathResult) []Side { return h.Throughput8 })
	e2eSides   = sectionSides(func(r *Results) *EndToEndResult { return r.EndToEnd }, func(e *EndToEndResult) []Side { return e.Sides })
)

func p50(s *Side) float64  { return s.P50Ms }
func tput(s *Side) float64 { return s.Throughput }

// serverFig reads a server time per replay, or per first request when
// first is set: from what pick finds in the hot path section, through f. A
// time of zero was not measured.
func serverFig[T any](first bool, pick func(h *HotPathResult) (replay, firstReq *T), f func(t *T) float64) func(r *Results) (float64, bool) {
	return func(r *Results) (float64, bool) {
		if r.HotPath == nil {
			return 0, false
		}
		t, ft := pick(r.HotPath)
		if first {
			t = ft
		}
		if t == nil || f(t) == 0 {
			return 0, false
		}
		return f(t), true
	}
}

// pgExec is the server times of the first query mode measured (exec).
func pgExec(h *HotPathResult) (replay, first *PGServerTime) {
	if len(h.Modes) == 0 {
		return nil, nil
	}
	return h.Modes[0].Replay, h.Modes[0].First
}

func redisOps(h *HotPathResult) (replay, first *RedisOpTime) {
	if h.Redis == nil {
		return nil, nil
	}
	return h.Redis.Replay, h.Redis.First
}

func pgServer(first bool) func(r *Results) (float64, bool) {
	return serverFig(first, pgExec, func(t *PGServerTime) float64 { return t.TotalUs })
}

func pgServerMin(first bool) func(r *Results) (float64, bool) {
	return serverFig(first, pgExec, func(t *PGServerTime) float64 { return t.MinUs })
}

func redisServer(first bool) func(r *Results) (float64, bool) {
	return serverFig(first, redisOps, func(t *RedisOpTime) float64 { return t.ServerUs })
}

func fingerprintFig(label string) func(r *Results) (float64, bool) {
	return func(r *Results) (float64, bool) {
		if r.Fingerprint == nil {
			return 0, false
		}
		for _, s := range r.Fingerprint.Sizes {
			if s.Label == label {
				return float64(s.BytesPerOp) / (1 << 20), true
			}
		}
		return 0, false
	}
}

var beforeAfterFigures = []figure{
	{"PostgreSQL `SELECT 1` p50", "ms", sideFig(floorPG, "floor (SELECT 1)", p50), true},
	{"PostgreSQL replay p50", "ms", sideFig(floorPG, "replay", p50), true},
	{"PostgreSQL first request p50", "ms", sideFig(floorPG, "first request", p50), true},
	{"PostgreSQL claim alone (completed key) p50", "ms", sideFig(floorPG, "claim alone (completed key)", p50), true},
	{"PostgreSQL replay vs `SELECT 1`", "×", ratioFig(floorPG, "replay", "floor (SELECT 1)", p50), true},
	{"PostgreSQL first request vs `SELECT 1`", "×", ratioFig(floorPG, "first request", "floor (SELECT 1)", p50), true},
	{"PostgreSQL server time per replay (exec mode)", "µs", pgServer(false), true},
	{"PostgreSQL server time per first request (exec mode)", "µs", pgServer(true), true},
	{"PostgreSQL server time per replay, fastest calls", "µs", pgServerMin(false), true},
	{"PostgreSQL server time per first request, fastest calls", "µs", pgServerMin(true), true},
	{"8 clients: replay throughput vs `SELECT 1`", "×", ratioFig(thr8, "replay", "floor (SELECT 1)", tput), false},
	{"Redis `PING` p50", "ms", sideFig(floorRedis, "floor (PING)", p50), true},
	{"Redis replay p50", "ms", sideFig(floorRedis, "replay", p50), true},
	{"Redis first request p50", "ms", sideFig(floorRedis, "first request", p50), true},
	{"Redis claim alone (completed key) p50", "ms", sideFig(floorRedis, "claim alone (completed key)", p50), true},
	{"Redis replay vs `PING`", "×", ratioFig(floorRedis, "replay", "floor (PING)", p50), true},
	{"Redis first request vs `PING`", "×", ratioFig(floorRedis, "first request", "floor (PING)", p50), true},
	{"Redis server time per replay", "µs", redisServer(false), true},
	{"Redis server time per first request", "µs", redisServer(true), true},
	{"0.5 ms each way: PostgreSQL replay p50", "ms", sideFig(delayPG, "replay", p50), true},
	{"0.5 ms each way: PostgreSQL first request p50", "ms", sideFig(delayPG, "first request", p50), true},
	{"0.5 ms each way: Redis replay p50", "ms", sideFig(delayRedis, "replay", p50), true},
	{"0.5 ms each way: Redis first request p50", "ms", sideFig(delayRedis, "first request", p50), true},
	{"POST /tasks wrapped vs unwrapped, req/s", "×", ratioFig(e2eSides, "wrapped (first request)", "unwrapped", tput), false},
	{"Fingerprint of a 6 MB body, allocated", "MiB", fingerprintFig("6 MB"), true},
}

// beforeAfterMarkdown renders the comparison with the -before run.
func (b *bench) beforeAfterMarkdown(w *strings.Builder) {
	before := b.before
	if before == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## Before and after\n\n")
	var measured []string
	for _, sec := range []struct {
		name string
		ok   bool
	}{{"fingerprint", before.Fingerprint != nil}, {"floor", before.Floor != nil}, {"hotpath", before.HotPath != nil},
		{"delay", before.Delay != nil}, {"durability", before.Durability != nil}, {"e2e", before.EndToEnd != nil},
		{"coldstart", before.ColdStart != nil}, {"growth", before.Growth != nil}} {
		if sec.ok {
			measured = append(measured, sec.name)
		}
	}
	p("*Before* is a run of %s (sections %s, %d repetitions) on the code before the changes below, on this machine, with this same harness (%s); *after* is this run. Both ran on a shared machine; read ratios within a run before absolute figures across runs.\n\n",
		before.Started.Format("2006-01-02 15:04 MST"), strings.Join(measured, ", "), before.Reps,
		noiseShort(before.Noise.CVPct)+fmt.Sprintf(", calibration CV %.1f%%", before.Noise.CVPct))
	if b.beforeNotes != "" {
		p("%s\n\n", strings.TrimSpace(b.beforeNotes))
	}
	p("| figure | before | after | after / before |\n|---|---|---|---|\n")
	for _, f := range beforeAfterFigures {
		x, okx := f.get(before)
		y, oky := f.get(b.res)
		if !okx && !oky {
			continue
		}
		cell := func(v float64, ok bool) string {
			if !ok {
				return "—"
			}
			switch f.unit {
			case "ms":
				return fmt.Sprintf("%.3f ms", v)
			case "µs":
				return fmt.Sprintf("%.1f µs", v)
			case "MiB":
				return fmt.Sprintf("%.1f MiB", v)
			}
			return fx(v)
		}
		change := "—"
		if okx && oky {
			change = fx(ratio(y, x))
		}
		p("| %s | %s | %s | %s |\n", f.name, cell(x, okx), cell(y, oky), change)
	}
	p("\n")
}
