package main

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

func (b *bench) markdown(plots map[string]string) string {
	r := b.res
	var w strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&w, format, args...) }

	p("# Performance\n\n")
	p("<!-- Written by `make bench` (go run ./cmd/bench); do not edit by hand. Raw figures: performance/results.json. -->\n\n")
	p("%s\n\n", b.summary())
	if r.Mode == "quick" {
		p("> **This is a quick run** (`-quick`): short loops and small tables that check the harness end to end. Its numbers are not the project's figures; run `make bench` for those.\n\n")
	}

	p("## Targets\n\n| item | what | target | this run | verdict |\n|---|---|---|---|---|\n")
	for _, t := range r.Targets {
		p("| %s | %s | %s | %s | %s |\n", t.Item, t.What, t.Target, orDash(t.Value), t.verdict())
	}
	p("\n")

	b.missedMarkdown(&w)

	p("## How it was measured\n\n")
	p("- One run of `make bench` on %s, %s run, %d repetitions of every measurement; the run took %s.\n",
		r.Started.Format("2006-01-02 15:04 MST"), r.Mode, r.Reps, (time.Duration(r.Seconds) * time.Second).String())
	p("- The sides of each comparison run in the same process against the same servers, interleaved (A B, B A, A B, …) so that drift of the machine hits every side; each side is warmed up once first.\n")
	p("- Each repetition is a load loop bounded in time and count; its p50 and p99 are taken over all its operations. The tables give the **median over repetitions** of each figure, the per-repetition values, and the spread (interquartile range of the repetitions over their median). A ratio is median(A)/median(B).\n")
	p("- Latency is measured by the client around the call under test only (request building excluded).\n")
	p("- Nothing here is asserted by a test: the report says which targets were met.\n\n")

	p("## Machine and servers\n\n| | |\n|---|---|\n")
	m := r.Machine
	p("| CPU | %s, %d CPUs (nproc) |\n| memory | %s |\n| kernel | %s |\n| Go | %s %s/%s |\n| load average (1, 5, 15 min) | %s at the start, %s at the end |\n",
		m.CPUModel, m.CPUs, m.MemTotal, m.Kernel, m.GoVersion, m.GOOS, m.GOARCH, m.LoadStart, m.LoadEnd)
	p("| PostgreSQL | %s |\n", r.PostgresWhere)
	for _, k := range postgresSettings {
		if v, ok := r.Postgres[k]; ok {
			p("| `%s` | %s |\n", k, v)
		}
	}
	for _, server := range []struct {
		name     string
		settings map[string]string
	}{{"Redis", r.Redis}, {"Valkey", r.Valkey}} {
		keys := make([]string, 0, len(server.settings))
		for k := range server.settings {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			p("| %s `%s` | %s |\n", server.name, k, orDash(server.settings[k]))
		}
	}
	p("\n")

	n := r.Noise
	p("### How noisy the machine was\n\n")
	p("A fixed CPU workload (SHA-256 over 16 MiB) was timed %d times through the run: median %.1f ms, min %.1f, max %.1f, **coefficient of variation %.1f%%** (%s); its interquartile range is %.0f%% of the median, so most of the variation comes from a few slow moments. ",
		len(n.Points), n.MedianMs, n.MinMs, n.MaxMs, n.CVPct, noiseWord(n.CVPct), n.IQRPct)
	p("The spread columns below give the same information per measurement. The machine has %d CPUs and was shared with other work during the run (load average %s → %s).\n\n", m.CPUs, m.LoadStart, m.LoadEnd)
	img(&w, plots, "noise", "calibration workload through the run")

	if f := r.Floor; f != nil {
		p("## 1. The floor: a bare round trip against the decorator\n\n")
		p("One client, one call at a time, through the same pool (package dbpool, URL mode). The floor is `SELECT 1` (PostgreSQL) or `PING` (Redis); *replay* is the decorator (`idempotency.Wrap`) answering a key already completed (one claim round trip); *first request* is a new key around a handler that does nothing (claim + complete, two round trips). The decorator's JSON log and EMF metric lines are formatted and written to /dev/null, as Lambda would ship them.\n\n")
		p("**PostgreSQL**\n\n%s\n", sideTable(f.Postgres, 0, false))
		if len(f.Redis) > 0 {
			p("**Redis** (private redis-server, persistence off)\n\n%s\n", sideTable(f.Redis, 0, false))
		}
		for _, st := range []struct {
			name  string
			ss    []Side
			floor string
		}{{"PostgreSQL", f.Postgres, "floor (SELECT 1)"}, {"Redis", f.Redis, "floor (PING)"}} {
			fl, rep, alone := side(st.ss, st.floor), side(st.ss, "replay"), side(st.ss, "claim alone (completed key)")
			if fl == nil || rep == nil || alone == nil {
				continue
			}
			p("%s: the replay's claim on its own, without the decorator, is %s the floor at p50 (%.3f ms); the decorator adds %.3f ms on top (replay − claim alone, p50).",
				st.name, fx(ratio(alone.P50Ms, fl.P50Ms)), alone.P50Ms, rep.P50Ms-alone.P50Ms)
			if st.name == "PostgreSQL" {
				p(" Most of a replay's cost is thus the claim statement itself (package pgstore), not the decorator.")
			}
			p("\n\n")
		}
		img(&w, plots, "floor", "floor vs replay vs first request")
	}
	b.hotPathMarkdown(&w)
	b.directMarkdown(&w)
	b.poolFloorMarkdown(&w)
	b.beforeAfterMarkdown(&w)

	if d := r.Durability; d != nil {
		p("## 2. ADR 009's premise: UNLOGGED against LOGGED\n\n")
		p("Claim of a new key followed by its completion (the store's part of a first request), through pgstore, on `idempotency_keys` (UNLOGGED) and on a LOGGED copy (the same migrations applied in a schema of their own, then `ALTER TABLE … SET LOGGED`, so that it has its own claim function), with `synchronous_commit = %s` and `fsync = %s`. Both tables are emptied and given the same %d keys before each level. Redis (persistence off) is shown beside them; it starts each level empty.\n\n",
			r.Postgres["synchronous_commit"], r.Postgres["fsync"], d.SeedRows)
		for _, l := range d.Levels {
			plural := "s"
			if l.Clients == 1 {
				plural = ""
			}
			p("**%d concurrent client%s** (ratios against LOGGED)\n\n%s\n", l.Clients, plural, sideTable(l.Sides, 1, true))
		}
		img(&w, plots, "durability", "throughput against clients")
		img(&w, plots, "durability_p99", "p99 against clients")
		p("**Caveat: the local ratio is an upper bound.** On vanilla PostgreSQL an UNLOGGED table skips the WAL, so its commits do not wait for a WAL flush; that is what the ratio above measures. On Aurora PostgreSQL, AWS documents UNLOGGED tables as crash-safe (Aurora's storage keeps them) and their speed-up as possibly small, because Aurora's log-structured storage already makes durable writes cheap. Expect the gain on Aurora to be at most this, and possibly close to none; the choice of UNLOGGED there rests on it costing nothing, not on this number.\n\n")
	}

	if e := r.EndToEnd; e != nil {
		p("## 3. End to end over the local API\n\n")
		p("POST /tasks over HTTP/1.1 keep-alive on a loopback listener, through the local API gateway (package localapi: routing, JWT authorizer, payload 2.0 events), %d concurrent clients (one user each), one database pool of %d connections shared by both handlers. *wrapped* is the CreateTaskFunction handler exactly as package taskfn builds it (decorator + PostgreSQL store; its log and metric lines to /dev/null); *unwrapped* is the same internal/tasks handler without the decorator; *replay* repeats one completed key per client. The load generator, the gateway, the handlers and PostgreSQL share the machine's %d CPUs, so throughput here is CPU-bound and the ratio is the fair figure.\n\n", e.Clients, e.PoolConns, r.Machine.CPUs)
		p("%s\n", sideTable(e.Sides, 0, true))
		img(&w, plots, "e2e", "requests per second")
	}

	if g := r.Growth; g != nil {
		p("## 4. Growth and purge\n\n")
		p("One client claims new keys (the claim statement only) with the table holding the given number of live, completed keys. Tables are filled with `INSERT … SELECT generate_series` (two at a time, one per core); large fills drop the indexes and build them again, then `VACUUM ANALYZE` and a `CHECKPOINT` (so that writing the fill's pages back does not happen during the measurement).\n\n")
		p("| live keys | fill: insert | indexes | vacuum analyze + checkpoint | table + indexes | claim p50 (ms) | claim p99 (ms) | p50 vs first | p99 vs first | p50 per run | p99 per run |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
		for _, s := range g.Steps {
			base := g.Steps[0].Claim
			p("| %s | %.1f s | %.1f s | %.1f s | %d MB | %.3f | %.3f | %s | %s | %s | %s |\n",
				countLabel(s.LiveKeys), s.Fill.InsertSeconds, s.Fill.IndexSeconds, s.Fill.VacuumSeconds+s.Fill.CheckpointSeconds, s.Fill.TableBytes>>20,
				s.Claim.P50Ms, s.Claim.P99Ms, fx(ratio(s.Claim.P50Ms, base.P50Ms)), fx(ratio(s.Claim.P99Ms, base.P99Ms)),
				perRun(s.Claim, func(r Run) float64 { return r.P50Ms }), perRun(s.Claim, func(r Run) float64 { return r.P99Ms }))
		}
		p("\n")
		img(&w, plots, "growth", "claim latency against live keys")
		if pr := g.Purge; pr != nil {
			p("**Purge.** %s expired keys are added beside the %s live ones (inserted into the live indexes), then `CALL purge_expired_idempotency_keys()` runs (batches of 5000, a commit after each) while one client keeps claiming; just before, the same client claims for a while without a purge. %d purge run(s).\n\n",
				countLabel(pr.ExpiredKeys), countLabel(pr.LiveKeys), len(pr.Runs))
			p("| run | filling the expired keys | purge | deleted | left | claim p99 without purge (ms) | claim p99 during purge (ms) |\n|---|---|---|---|---|---|---|\n")
			for i, run := range pr.Runs {
				var fill Fill
				if i < len(pr.Fills) {
					fill = pr.Fills[i]
				}
				var base, during float64
				if i < len(pr.Baseline.Runs) {
					base = pr.Baseline.Runs[i].P99Ms
				}
				if i < len(pr.During.Runs) {
					during = pr.During.Runs[i].P99Ms
				}
				p("| %d | %.1f s | %.1f s | %d | %d | %.3f | %.3f |\n", i+1, fill.InsertSeconds+fill.VacuumSeconds+fill.CheckpointSeconds, run.Seconds, run.Deleted, run.Left, base, during)
			}
			p("\nMedian purge time **%.1f s**; claim p99 %.3f ms during the purge against %.3f ms without (%s); p50 %.3f against %.3f ms.\n\n",
				pr.PurgeSeconds, pr.During.P99Ms, pr.Baseline.P99Ms, fx(ratio(pr.During.P99Ms, pr.Baseline.P99Ms)), pr.During.P50Ms, pr.Baseline.P50Ms)
			img(&w, plots, "purge", "claims during the purge")
		}
	}

	if c := r.ColdStart; c != nil {
		p("## 5. Cold start\n\n")
		p("`bootstrap` of CreateTaskFunction built as deployed: `%s` (GOARCH=arm64) `./functions/create-task`.\n\n", c.BuildFlags)
		p("| | |\n|---|---|\n| linux/arm64 (deployed) | **%s** (%d bytes) |\n| linux/%s (timed below) | %s (%d bytes) |\n\n", mib(c.Arm64Bytes), c.Arm64Bytes, c.HostArch, mib(c.HostBytes), c.HostBytes)
		if len(c.Runs) > 0 {
			p("Timed on this machine's architecture (arm64 cannot run here) under aws-lambda-rie, %d cold starts, each a new emulator process given a POST /tasks event as soon as it listens. Medians:\n\n", len(c.Runs))
			p("| | median (ms) | per run (ms) |\n|---|---|---|\n")
			p("| **process start → first response** | **%.1f** | %s |\n", c.TotalMs, joinRuns(c.Runs, func(r ColdRun) float64 { return r.TotalMs }))
			p("| the emulator starts and listens | %.1f | %s |\n", c.ListenMs, joinRuns(c.Runs, func(r ColdRun) float64 { return r.ListenMs }))
			p("| the first event: bootstrap start, taskfn.Build, the request | %.1f | %s |\n", c.FirstInvokeMs, joinRuns(c.Runs, func(r ColdRun) float64 { return r.FirstInvokeMs }))
			p("| a second event to the warm process | %.1f | %s |\n", c.WarmInvokeMs, joinRuns(c.Runs, func(r ColdRun) float64 { return r.WarmInvokeMs }))
			p("| init: first event − warm event | %.1f | %s |\n", c.InitMs, joinRuns(c.Runs, func(r ColdRun) float64 { return r.InitMs }))
			p("| of which the database connect (fresh `dbpool.New`, one connection made and checked, timed apart) | %.1f | %s |\n\n", c.DBConnectMs, joinFloats(c.DBConnectRun))
			p("The emulator reports an Init Duration of its own sandbox only (it starts the bootstrap process only when the first event arrives, and counts that in the invocation), so the split above is measured from outside. Here the database is on loopback; through RDS Proxy with IAM auth and TLS the connect is what grows (a token signature and a TLS handshake), so it is shown apart. The two builds took %.0f s.\n\n", c.BuildSeconds)
			img(&w, plots, "coldstart", "cold starts")
		}
	}

	w.WriteString(b.dynamoMarkdown())
	w.WriteString(b.tracingMarkdown())

	if len(r.Notes) > 0 || len(r.Failures) > 0 {
		p("## Notes\n\n")
		for _, f := range r.Failures {
			p("- Failed: %s\n", f)
		}
		for _, n := range r.Notes {
			p("- %s\n", n)
		}
		p("\n")
	}
	p("## Running it\n\n`make bench` (this %s run took %s; the full run takes about 20 minutes on 2 cores) writes this file, `docs/performance/*.png`, `docs/performance/results.json` and the replay's CPU profile. `go run ./cmd/bench -quick` checks the harness in a minute or two; `-only %s` runs some sections; `-before file` adds a before-and-after section against an earlier run's results.json; `DATABASE_URL` (or `-database-url`) measures another PostgreSQL in a schema of its own instead of a private cluster.\n", r.Mode, (time.Duration(r.Seconds) * time.Second).String(), strings.Join(sections, ","))
	return w.String()
}

// summary is the README-ready paragraph.
func (b *bench) summary() string {
	r := b.res
	var metN, total int
	verdict := map[string]string{}
	for _, t := range r.Targets {
		if t.Met == nil {
			continue
		}
		total++
		v := "not met"
		if *t.Met {
			metN++
			v = "met"
		}
		verdict[t.Item+t.What] = v
	}
	find := func(item, prefix string) string {
		for _, t := range r.Targets {
			if t.Item == item && strings.HasPrefix(t.What, prefix) {
				return verdict[t.Item+t.What]
			}
		}
		return "not measured"
	}
	var s strings.Builder
	fmt.Fprintf(&s, "**Summary.** %s run of %s on %d CPUs (%s), Go %s, PostgreSQL %s; the machine was %s (calibration CV %.1f%%). **%d of %d targets met.**",
		titleCase(r.Mode), r.Started.Format("2006-01-02"), r.Machine.CPUs, r.Machine.CPUModel, strings.TrimPrefix(r.Machine.GoVersion, "go"),
		strings.Fields(r.Postgres["server_version"] + " ?")[0], noiseShort(r.Noise.CVPct), r.Noise.CVPct, metN, total)
	if f := r.Floor; f != nil {
		fl, rep, first, alone := side(f.Postgres, "floor (SELECT 1)"), side(f.Postgres, "replay"), side(f.Postgres, "first request"), side(f.Postgres, "claim alone (completed key)")
		if fl != nil && rep != nil && first != nil {
			fmt.Fprintf(&s, " (1) A replay through the decorator costs %s a bare `SELECT 1` at p50 (target ≤ 1.5×: %s) and a first request %s (target ≤ 3×: %s)",
				fx(ratio(rep.P50Ms, fl.P50Ms)), find("1", "PostgreSQL: replay"), fx(ratio(first.P50Ms, fl.P50Ms)), find("1", "PostgreSQL: first"))
			if alone != nil {
				fmt.Fprintf(&s, "; the replay's claim statement alone is %s, and the decorator adds %.2f ms to it", fx(ratio(alone.P50Ms, fl.P50Ms)), rep.P50Ms-alone.P50Ms)
			}
			s.WriteString(".")
		}
		fl, rep, first = side(f.Redis, "floor (PING)"), side(f.Redis, "replay"), side(f.Redis, "first request")
		if fl != nil && rep != nil && first != nil {
			fmt.Fprintf(&s, " With Redis: %s and %s a `PING` (%s, %s).", fx(ratio(rep.P50Ms, fl.P50Ms)), fx(ratio(first.P50Ms, fl.P50Ms)),
				find("1", "Redis: replay"), find("1", "Redis: first"))
		}
	}
	if d := r.Durability; d != nil && len(d.Levels) > 0 {
		var parts, clients []string
		for _, l := range d.Levels {
			if u, g := side(l.Sides, "UNLOGGED"), side(l.Sides, "LOGGED"); u != nil && g != nil {
				parts = append(parts, fx(ratio(u.Throughput, g.Throughput)))
				clients = append(clients, fmt.Sprint(l.Clients))
			}
		}
		holds := "holds"
		if find("2", "ADR") != "met" {
			holds = "does not hold"
		}
		fmt.Fprintf(&s, " (2) ADR 009's premise %s locally: UNLOGGED gives %s the LOGGED table's claim+complete throughput at %s clients, an upper bound for Aurora, where AWS documents the gain as possibly small.",
			holds, strings.Join(parts, " / "), strings.Join(clients, " / "))
	}
	if e := r.EndToEnd; e != nil {
		if u, w := side(e.Sides, "unwrapped"), side(e.Sides, "wrapped (first request)"); u != nil && w != nil {
			fmt.Fprintf(&s, " (3) End to end over the local API, POST /tasks through the decorator keeps %s of the unwrapped throughput (target ≥ 0.6×: %s).",
				fx(ratio(w.Throughput, u.Throughput)), find("3", "POST"))
		}
	}
	if g := r.Growth; g != nil && len(g.Steps) > 1 {
		first, last := g.Steps[0], g.Steps[len(g.Steps)-1]
		v := find("4", "claim latency")
		for _, t := range r.Targets {
			if t.Item == "4" && strings.HasPrefix(t.What, "claim latency") && strings.Contains(t.Value, "only by being faster") {
				v += ", only by being faster with more keys"
			}
		}
		fmt.Fprintf(&s, " (4) From %s to %s live keys claim p50 moves %s and p99 %s (target within ±25%%: %s)",
			countLabel(first.LiveKeys), countLabel(last.LiveKeys), fx(ratio(last.Claim.P50Ms, first.Claim.P50Ms)), fx(ratio(last.Claim.P99Ms, first.Claim.P99Ms)), v)
		if p := g.Purge; p != nil && len(p.Runs) > 0 {
			fmt.Fprintf(&s, "; purging %s expired keys takes %.1f s, during which claim p99 is %s that without a purge (target ≤ 3×: %s)",
				countLabel(p.ExpiredKeys), p.PurgeSeconds, fx(ratio(p.During.P99Ms, p.Baseline.P99Ms)), find("4", "claim p99 during"))
		}
		s.WriteString(".")
	}
	if c := r.ColdStart; c != nil && c.Arm64Bytes > 0 {
		fmt.Fprintf(&s, " (5) The stripped linux/arm64 `bootstrap` is %s", mib(c.Arm64Bytes))
		if len(c.Runs) > 0 {
			fmt.Fprintf(&s, "; under the emulator a cold start reaches its first response in %.0f ms (median of %d), the database connect being %.0f ms of it", c.TotalMs, len(c.Runs), c.DBConnectMs)
		}
		s.WriteString(".")
	}
	return s.String()
}

func titleCase(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// sideTable renders a comparison; ratios are against ss[base].
func sideTable(ss []Side, base int, throughput bool) string {
	if len(ss) == 0 {
		return "(not measured)\n"
	}
	var w strings.Builder
	b := ss[base]
	w.WriteString("| | p50 (ms) | p99 (ms) |")
	if throughput {
		w.WriteString(" ops/s |")
	}
	fmt.Fprintf(&w, " p50 vs %s | p99 vs %s |", b.Name, b.Name)
	if throughput {
		fmt.Fprintf(&w, " ops/s vs %s |", b.Name)
	}
	w.WriteString(" spread p50 / p99 | p50 per run | p99 per run |")
	if throughput {
		w.WriteString(" ops/s per run |")
	}
	w.WriteString(" errors |\n|---|---|---|")
	if throughput {
		w.WriteString("---|---|")
	}
	w.WriteString("---|---|---|---|---|")
	if throughput {
		w.WriteString("---|")
	}
	w.WriteString("---|\n")
	for _, s := range ss {
		fmt.Fprintf(&w, "| %s | %.3f | %.3f |", s.Name, s.P50Ms, s.P99Ms)
		if throughput {
			fmt.Fprintf(&w, " %.0f |", s.Throughput)
		}
		fmt.Fprintf(&w, " %s | %s |", fx(ratio(s.P50Ms, b.P50Ms)), fx(ratio(s.P99Ms, b.P99Ms)))
		if throughput {
			fmt.Fprintf(&w, " %s |", fx(ratio(s.Throughput, b.Throughput)))
		}
		fmt.Fprintf(&w, " %.0f%% / %.0f%% | %s | %s |", s.P50IQRPct, s.P99IQRPct,
			perRun(s, func(r Run) float64 { return r.P50Ms }), perRun(s, func(r Run) float64 { return r.P99Ms }))
		if throughput {
			var xs []string
			for _, r := range s.Runs {
				xs = append(xs, fmt.Sprintf("%.0f", r.Throughput))
			}
			fmt.Fprintf(&w, " %s |", strings.Join(xs, ", "))
		}
		fmt.Fprintf(&w, " %d |\n", s.Errors)
	}
	return w.String()
}

func perRun(s Side, f func(Run) float64) string {
	var xs []string
	for _, r := range s.Runs {
		xs = append(xs, fmt.Sprintf("%.3f", f(r)))
	}
	return strings.Join(xs, ", ")
}

func joinRuns(runs []ColdRun, f func(ColdRun) float64) string {
	var xs []float64
	for _, r := range runs {
		xs = append(xs, f(r))
	}
	return joinFloats(xs)
}

func joinFloats(xs []float64) string {
	var ss []string
	for _, x := range xs {
		ss = append(ss, fmt.Sprintf("%.1f", x))
	}
	return strings.Join(ss, ", ")
}

func img(w *strings.Builder, plots map[string]string, key, alt string) {
	if f, ok := plots[key]; ok {
		fmt.Fprintf(w, "![%s](%s)\n\n", alt, f)
	}
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func orDash(s string) string {
	if s == "" {
		return "—"
	}
	return s
}

func noiseShort(cvPct float64) string {
	switch {
	case cvPct < 3:
		return "quiet"
	case cvPct < 10:
		return "somewhat noisy"
	default:
		return "noisy, shared with other work"
	}
}

// noiseWord says in a word how quiet a calibration CV is.
func noiseWord(cvPct float64) string {
	switch {
	case cvPct < 3:
		return "quiet"
	case cvPct < 10:
		return "somewhat noisy"
	default:
		return "noisy: read ratios, not absolute numbers"
	}
}
