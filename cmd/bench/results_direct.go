package main

import (
	"fmt"
	"math"
	"sort"
)

// pairedRatios is f(a)/f(b) for each repetition, which compare ran side by
// side (interleaved), sorted.
func pairedRatios(a, b *Side, f func(Run) float64) []float64 {
	var xs []float64
	for i := range min(len(a.Runs), len(b.Runs)) {
		if x := ratio(f(a.Runs[i]), f(b.Runs[i])); !math.IsNaN(x) && !math.IsInf(x, 0) {
			xs = append(xs, x)
		}
	}
	sort.Float64s(xs)
	return xs
}

// pairedCell shows the median of the paired ratios and their range.
func pairedCell(xs []float64) string {
	if len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%s (repetitions %.2f–%.2f×)", fx(median(xs)), xs[0], xs[len(xs)-1])
}

func runP50(r Run) float64        { return r.P50Ms }
func runThroughput(r Run) float64 { return r.Throughput }

// directTargets judges section 1f. The peers' sides are the statements
// those libraries send, without their own work around them: a lower bound
// of their time, so a target met against them is met against the library;
// one missed is not decided. They are compared with the store's calls,
// likewise without the decorator's work around them.
func (r *Results) directTargets(add func(item, what, target, value string, ok *bool)) {
	d := r.Direct
	if d == nil {
		add("1f", "PostgreSQL direct replay vs gopotency's replay statements, 1 client", "≤ 1.0× p50", "", nil)
		return
	}
	for _, state := range []struct {
		label      string
		one, eight []Side
	}{{"", d.One, d.Eight}, {", cores kept awake", d.OneAwake, d.EightAwake}} {
		if me, peer := side(state.one, sideStoreReplay), side(state.one, sideGopotReplay); me != nil && peer != nil {
			xs := pairedRatios(me, peer, runP50)
			add("1f", "PostgreSQL replay's claim, direct connection (prepared), vs gopotency's replay statements, 1 client"+state.label, "≤ 1.0× p50",
				fmt.Sprintf("%s; %.3f vs %.3f ms", pairedCell(xs), me.P50Ms, peer.P50Ms), met(len(xs) > 0 && median(xs) <= 1))
		}
		if me, peer := side(state.eight, sideStoreReplay), side(state.eight, sideGopotReplay); me != nil && peer != nil {
			xs := pairedRatios(me, peer, runThroughput)
			add("1f", "PostgreSQL replay's claim, direct connection (prepared), 8 clients: requests/s vs gopotency's replay statements"+state.label, "≥ 1.0×",
				fmt.Sprintf("%s; %.0f vs %.0f req/s", pairedCell(xs), me.Throughput, peer.Throughput), met(len(xs) > 0 && median(xs) >= 1))
		}
		if me := side(state.one, sideStoreFirst); me != nil {
			for _, name := range []string{sideGopotFirst, sideLeaseFirst} {
				if peer := side(state.one, name); peer != nil {
					xs := pairedRatios(me, peer, runP50)
					add("1f", "PostgreSQL first request's claim and completion, direct connection (prepared), vs "+name+state.label, "≤ 1.0× p50",
						fmt.Sprintf("%s; %.3f vs %.3f ms", pairedCell(xs), me.P50Ms, peer.P50Ms), met(len(xs) > 0 && median(xs) <= 1))
				}
			}
		}
	}
	for _, state := range []struct {
		label string
		sides []Side
	}{{"", d.Redis}, {", cores kept awake", d.RedisAwake}} {
		if me, peer := side(state.sides, sideStoreFirst), side(state.sides, sideLeaseRedisFirst); me != nil && peer != nil {
			xs := pairedRatios(me, peer, runP50)
			add("1f", "Redis 7.0 first request's claim and completion vs idemlease's first-request commands, 1 client"+state.label, "≤ 1.0× p50",
				fmt.Sprintf("%s; %.3f vs %.3f ms", pairedCell(xs), me.P50Ms, peer.P50Ms), met(len(xs) > 0 && median(xs) <= 1))
		}
	}
	if me, peer := side(d.Bouncer, sideStoreReplay), side(d.Bouncer, sideGopotReplay); me != nil && peer != nil {
		xs := pairedRatios(me, peer, runP50)
		add("1f", "PostgreSQL replay's claim through pgbouncer (exec mode) vs gopotency's replay statements through it, 1 client", "≤ 0.89× p50 (as before)",
			fmt.Sprintf("%s; %.3f vs %.3f ms", pairedCell(xs), me.P50Ms, peer.P50Ms), met(len(xs) > 0 && median(xs) <= 0.89))
	}
}
