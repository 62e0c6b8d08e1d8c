package main

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// Results is everything one run measured; it is written as
// docs/performance/results.json and rendered as docs/performance.md.
type Results struct {
	Started       time.Time         `json:"started"`
	Seconds       float64           `json:"seconds"`
	Mode          string            `json:"mode"`
	Reps          int               `json:"reps"`
	Machine       Machine           `json:"machine"`
	PostgresWhere string            `json:"postgres_where"`
	Postgres      map[string]string `json:"postgres_settings"`
	Redis         map[string]string `json:"redis_settings,omitempty"`
	Valkey        map[string]string `json:"valkey_settings,omitempty"`
	Noise         Calibration       `json:"noise"`

	Fingerprint *FingerprintResult `json:"fingerprint,omitempty"`
	Floor       *FloorResult       `json:"floor,omitempty"`
	Beyond      *BeyondResult      `json:"beyond,omitempty"`
	HotPath     *HotPathResult     `json:"hot_path,omitempty"`
	Direct      *DirectResult      `json:"direct,omitempty"`
	PoolFloor   *PoolFloorResult   `json:"pool_floor,omitempty"`
	Delay       *DelayResult       `json:"delay,omitempty"`
	Durability  *DurabilityResult  `json:"durability,omitempty"`
	EndToEnd    *EndToEndResult    `json:"end_to_end,omitempty"`
	ColdStart   *ColdStartResult   `json:"cold_start,omitempty"`
	Growth      *GrowthResult      `json:"growth,omitempty"`
	DynamoDB    *DynamoDBResult    `json:"dynamodb,omitempty"`
	Tracing     *TracingResult     `json:"tracing,omitempty"`

	Targets  []Target `json:"targets"`
	Failures []string `json:"failures,omitempty"`
	Notes    []string `json:"notes,omitempty"`
}

// Target is one of the work item's targets and whether this run met it.
type Target struct {
	Item   string `json:"item"`
	What   string `json:"what"`
	Target string `json:"target"`
	Value  string `json:"value"`
	// Met is nil when the run did not measure it.
	Met *bool `json:"met"`
}

func (t Target) verdict() string {
	switch {
	case t.Met == nil:
		return "not measured"
	case *t.Met:
		return "met"
	default:
		return "**not met**"
	}
}

func met(ok bool) *bool { return &ok }

func side(ss []Side, name string) *Side {
	for i := range ss {
		if ss[i].Name == name {
			return &ss[i]
		}
	}
	return nil
}

func fx(x float64) string {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f×", x)
}

// fxAt is fx with a third decimal when two would round x onto the target
// it is judged against (0.396× is not 0.40×).
func fxAt(x, target float64) string {
	if math.Abs(x-target) < 0.005 {
		return fmt.Sprintf("%.3f×", x)
	}
	return fx(x)
}

// evaluate fills Targets from what was measured.
func (r *Results) evaluate() {
	r.Targets = nil
	add := func(item, what, target, value string, ok *bool) {
		r.Targets = append(r.Targets, Target{item, what, target, value, ok})
	}
	floorTargets := func(store, floorName string, ss []Side, replayMax, firstMax float64) {
		fl, rep, first := side(ss, floorName), side(ss, "replay"), side(ss, "first request")
		rt, ft := fmt.Sprintf("≤ %.1f× p50", replayMax), fmt.Sprintf("≤ %.1f× p50", firstMax)
		if fl == nil || rep == nil || first == nil {
			add("1", store+": replay vs floor", rt, "", nil)
			add("1", store+": first request vs floor", ft, "", nil)
			return
		}
		rr, fr := ratio(rep.P50Ms, fl.P50Ms), ratio(first.P50Ms, fl.P50Ms)
		add("1", store+": replay vs "+floorLabel(floorName), rt,
			fmt.Sprintf("%s p50 (%s p99)", fxAt(rr, replayMax), fx(ratio(rep.P99Ms, fl.P99Ms))), met(rr <= replayMax))
		add("1", store+": first request vs "+floorLabel(floorName), ft,
			fmt.Sprintf("%s p50 (%s p99)", fxAt(fr, firstMax), fx(ratio(first.P99Ms, fl.P99Ms))), met(fr <= firstMax))
	}
	if r.Floor != nil {
		floorTargets("PostgreSQL", "floor (SELECT 1)", r.Floor.Postgres, 1.5, 3)
		if r.Floor.Redis != nil {
			floorTargets("Redis", "floor (PING)", r.Floor.Redis, 1.5, 2.5)
		}
	} else {
		floorTargets("PostgreSQL", "floor (SELECT 1)", nil, 1.5, 3)
	}
	if br := r.Beyond; br != nil {
		// Section 1e measures its sides turn by turn (compareInTurn), so each
		// repetition's ratio compares calls made in the same moments; the
		// range of those ratios is shown beside their sides' medians. The
		// cached replay against PING is reported in the section, not judged:
		// the work item sets the cache's target against SELECT 1.
		//
		// Each target is judged in both of the machine's states: as it is
		// (idle cores sleep between round trips) and with its cores kept
		// awake (awake.go), where the round trip is fastest and the client's
		// own costs weigh the most.
		for _, state := range []struct {
			label                   string
			postgres, redis, valkey []Side
		}{{"", br.Postgres, br.Redis, br.Valkey}, {", cores kept awake", br.PostgresAwake, br.RedisAwake, br.ValkeyAwake}} {
			if fl, c := side(state.postgres, "floor (SELECT 1)"), side(state.postgres, "replay (local cache)"); fl != nil && c != nil {
				x := ratio(c.P50Ms, fl.P50Ms)
				add("1e", "Local cache (PostgreSQL): replay vs `SELECT 1`"+state.label, "≤ 0.1× p50", fmt.Sprintf("%s p50 (%.4f vs %.3f ms; repetitions %s)", fxAt(x, 0.1), c.P50Ms, fl.P50Ms, repRatios(c, fl)), met(x <= 0.1))
			}
			// The Redis store's first request is judged on both servers:
			// Redis 7.0, where its completion is a script, and Valkey 8.1,
			// where it is one SET … IFEQ (ADR 0101).
			for _, server := range []struct {
				label string
				sides []Side
			}{{"Redis 7.0, completion by script", state.redis}, {"Valkey 8.1, completion by `SET … IFEQ`", state.valkey}} {
				if fl, f := side(server.sides, "floor (PING)"), side(server.sides, "first request"); fl != nil && f != nil {
					x := ratio(f.P50Ms, fl.P50Ms)
					add("1e", "Redis first request vs `PING`, "+server.label+state.label+" (a peer with the same two round trips: 4.0×)", "≤ 3.5× p50", fmt.Sprintf("%s p50 (%.3f vs %.3f ms; %s p99; repetitions %s)", fxAt(x, 3.5), f.P50Ms, fl.P50Ms, fx(ratio(f.P99Ms, fl.P99Ms)), repRatios(f, fl)), met(x <= 3.5))
				}
			}
		}
	}
	if h := r.HotPath; h != nil && len(h.Modes) > 0 && h.Modes[0].Replay != nil && h.Modes[0].First != nil {
		m := h.Modes[0]
		add("1", "PostgreSQL server time per replay ("+m.Mode+" mode, planning + execution)", "≤ 15 µs",
			fmt.Sprintf("%.1f µs (%.1f + %.1f)", m.Replay.TotalUs, m.Replay.PlanUs, m.Replay.ExecUs), met(m.Replay.TotalUs <= 15))
		add("1", "PostgreSQL server time per first request ("+m.Mode+" mode)", "≤ 60 µs",
			fmt.Sprintf("%.1f µs (%.1f + %.1f)", m.First.TotalUs, m.First.PlanUs, m.First.ExecUs), met(m.First.TotalUs <= 60))
	} else {
		add("1", "PostgreSQL server time per replay", "≤ 15 µs", "", nil)
		add("1", "PostgreSQL server time per first request", "≤ 60 µs", "", nil)
	}
	if h := r.HotPath; h != nil && side(h.Throughput8, "replay") != nil && side(h.Throughput8, "floor (SELECT 1)") != nil {
		rep, fl := side(h.Throughput8, "replay"), side(h.Throughput8, "floor (SELECT 1)")
		x := ratio(rep.Throughput, fl.Throughput)
		add("1", "8 clients: replay throughput vs `SELECT 1`", "≥ 0.4×",
			fmt.Sprintf("%s (%.0f vs %.0f req/s)", fxAt(x, 0.4), rep.Throughput, fl.Throughput), met(x >= 0.4))
	} else {
		add("1", "8 clients: replay throughput vs `SELECT 1`", "≥ 0.4×", "", nil)
	}

	r.directTargets(add)
	r.poolFloorTargets(add)

	if d := r.Durability; d != nil && len(d.Levels) > 0 {
		var parts []string
		ok := true
		for _, l := range d.Levels {
			u, g := side(l.Sides, "UNLOGGED"), side(l.Sides, "LOGGED")
			if u == nil || g == nil {
				continue
			}
			x := ratio(u.Throughput, g.Throughput)
			ok = ok && x > 1
			parts = append(parts, fmt.Sprintf("%s at %d", fx(x), l.Clients))
		}
		add("2", "ADR 009 premise: UNLOGGED claim+complete throughput over LOGGED (local upper bound; see the Aurora caveat)",
			"> 1× at every level", strings.Join(parts, ", "), met(ok))
	} else {
		add("2", "ADR 009 premise: UNLOGGED over LOGGED", "> 1×", "", nil)
	}

	if e := r.EndToEnd; e != nil && side(e.Sides, "unwrapped") != nil && side(e.Sides, "wrapped (first request)") != nil {
		u, w := side(e.Sides, "unwrapped"), side(e.Sides, "wrapped (first request)")
		x := ratio(w.Throughput, u.Throughput)
		add("3", "POST /tasks through the decorator vs unwrapped, requests/s", "≥ 0.6×",
			fmt.Sprintf("%s (%.0f vs %.0f req/s)", fxAt(x, 0.6), w.Throughput, u.Throughput), met(x >= 0.6))
	} else {
		add("3", "POST /tasks through the decorator vs unwrapped", "≥ 0.6×", "", nil)
	}

	if g := r.Growth; g != nil && len(g.Steps) > 1 {
		base := g.Steps[0].Claim
		ok, noSlower := true, true
		var parts []string
		for _, s := range g.Steps[1:] {
			a, b := ratio(s.Claim.P50Ms, base.P50Ms), ratio(s.Claim.P99Ms, base.P99Ms)
			ok = ok && a >= 0.75 && a <= 1.25 && b >= 0.75 && b <= 1.25
			noSlower = noSlower && a <= 1.25 && b <= 1.25
			parts = append(parts, fmt.Sprintf("%s keys: %s p50, %s p99", countLabel(s.LiveKeys), fx(a), fx(b)))
		}
		value := strings.Join(parts, "; ")
		if !ok && noSlower {
			value += " (outside the band only by being faster than with fewer keys: read it as the noise of the smallest step)"
		}
		add("4", fmt.Sprintf("claim latency vs %s keys", countLabel(g.Steps[0].LiveKeys)), "within ±25% (0.75×–1.25×)", value, met(ok))
	} else {
		add("4", "claim latency as keys grow", "within ±25%", "", nil)
	}
	if g := r.Growth; g != nil && g.Purge != nil && len(g.Purge.Runs) > 0 {
		p := g.Purge
		x := ratio(p.During.P99Ms, p.Baseline.P99Ms)
		add("4", fmt.Sprintf("claim p99 during a purge of %s expired keys vs none", countLabel(p.ExpiredKeys)), "≤ 3×",
			fmt.Sprintf("%s (%.2f vs %.2f ms; purge took %.1f s)", fx(x), p.During.P99Ms, p.Baseline.P99Ms, p.PurgeSeconds), met(x <= 3))
	} else {
		add("4", "claim p99 during a purge", "≤ 3×", "", nil)
	}
}

// countLabel writes 10000 as 10^4 and 5000000 as 5·10^6.
func countLabel(n int) string {
	if n <= 0 {
		return "0"
	}
	e := int(math.Floor(math.Log10(float64(n))))
	m := float64(n) / math.Pow10(e)
	if math.Abs(m-math.Round(m)) > 1e-9 {
		return fmt.Sprint(n)
	}
	if math.Round(m) == 1 {
		return fmt.Sprintf("10^%d", e)
	}
	return fmt.Sprintf("%d·10^%d", int(math.Round(m)), e)
}

// floorLabel is "`SELECT 1`" for "floor (SELECT 1)".
func floorLabel(name string) string {
	name = strings.TrimSuffix(strings.TrimPrefix(name, "floor ("), ")")
	return "`" + name + "`"
}

// repRatios is the range, over the repetitions, of a's p50 over b's p50 in
// the same repetition ("0.07–0.09×").
func repRatios(a, b *Side) string {
	lo, hi := math.Inf(1), math.Inf(-1)
	for i := range min(len(a.Runs), len(b.Runs)) {
		x := ratio(a.Runs[i].P50Ms, b.Runs[i].P50Ms)
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	if math.IsInf(lo, 0) {
		return "n/a"
	}
	return fmt.Sprintf("%.2f–%.2f×", lo, hi)
}
