package main

import (
	"fmt"
	"sort"
	"strings"
)

// hotPathMarkdown renders sections hotpath, delay and fingerprint.
func (b *bench) hotPathMarkdown(w *strings.Builder) {
	r := b.res
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	if h := r.HotPath; h != nil {
		p("## 1b. What the server spends, and the query mode\n\n")
		p("The same replay and first request as in section 1, through a pool in each pgx query exec mode. *exec* (unnamed statement, parameter types from the Go types, one round trip) is the deployed default; *simple protocol* interpolates on the client; *cache describe* keeps result descriptions but still parses and plans each call; all three keep no server-side state and work through a transaction-pooling proxy (pgbouncer 1.18 here, RDS Proxy). *cache statement* prepares named statements: it is shown for direct connections only, where pgstore's claim is a prepared plain read instead of the function call (section 1f). Server time is `pg_stat_statements` (planning + execution, top-level statements, whose execution time includes the functions they call) over consecutive operations, divided by their number; it is wall-clock time inside the server, so a busy machine inflates it. The last column sums each statement's fastest call instead: what a call costs when nothing else competes for the CPU.\n\n")
		p("| mode | proxy-safe | SELECT 1 p50 (ms) | replay p50 (ms) | first p50 (ms) | replay vs SELECT 1 | first vs SELECT 1 | server µs per replay (plan + exec) | server µs per first request (plan + exec) | fastest calls: replay / first (µs) |\n|---|---|---|---|---|---|---|---|---|---|\n")
		for _, m := range h.Modes {
			fl, rep, first := side(m.Sides, "floor (SELECT 1)"), side(m.Sides, "replay"), side(m.Sides, "first request")
			if fl == nil || rep == nil || first == nil {
				continue
			}
			p("| %s | %s | %.3f | %.3f | %.3f | %s | %s | %s | %s | %s |\n", m.Mode, yesNo(m.ProxySafe), fl.P50Ms, rep.P50Ms, first.P50Ms,
				fx(ratio(rep.P50Ms, fl.P50Ms)), fx(ratio(first.P50Ms, fl.P50Ms)), serverCell(m.Replay), serverCell(m.First), minCell(m.Replay, m.First))
		}
		p("\n")
		if len(h.Modes) > 0 && h.Modes[0].NoopShape != nil && h.Modes[0].Floor != nil {
			m := h.Modes[0]
			p("The floors under a claim, in the default mode (%s), from the same counters: `SELECT 1` costs the server %.1f µs (%.1f + %.1f); a PL/pgSQL function that returns at once, called with the claim's seven arguments, %.1f µs (%.1f + %.1f; fastest calls %.1f). A claim that is one function call cannot cost less than that second figure; what a replay spends above it (%.1f µs) is its one primary-key read and the answer.",
				m.Mode, m.Floor.TotalUs, m.Floor.PlanUs, m.Floor.ExecUs, m.NoopShape.TotalUs, m.NoopShape.PlanUs, m.NoopShape.ExecUs, m.NoopShape.MinUs, m.Replay.TotalUs-m.NoopShape.TotalUs)
			if m.PlainRead != nil {
				p(" The replay's read as a plain statement (no function) costs %.1f µs: %.1f planning, %.1f execution (fastest %.1f).", m.PlainRead.TotalUs, m.PlainRead.PlanUs, m.PlainRead.ExecUs, m.PlainRead.MinUs)
			}
			if m.Unguarded != nil {
				p(" The claim function without its `SET enable_seqscan = off` guard costs %.1f µs per replay (fastest %.1f, against %.1f with it).", m.Unguarded.TotalUs, m.Unguarded.MinUs, m.Replay.MinUs)
			}
			p("\n\n")
		}
		if len(h.Modes) > 0 && h.Modes[0].Replay != nil {
			m := h.Modes[0]
			p("Statements in the default mode (%s), per operation:\n\n| path | statement | calls per op | plan µs per call | exec µs per call |\n|---|---|---|---|---|\n", m.Mode)
			for _, st := range []struct {
				name string
				t    *PGServerTime
			}{{"replay", m.Replay}, {"first request", m.First}} {
				if st.t == nil {
					continue
				}
				for _, s := range st.t.Statements {
					if s.CallsPerOp < 0.01 {
						continue
					}
					p("| %s | `%s` | %.2f | %.1f | %.1f |\n", st.name, strings.ReplaceAll(s.Query, "|", "\\|"), s.CallsPerOp, s.PlanUsPerCall, s.ExecUsPerCall)
				}
			}
			p("\n")
		}
		if rt := h.Redis; rt != nil && rt.Replay != nil && rt.First != nil {
			p("**Redis**, from `INFO commandstats` over consecutive operations (a script's time includes its inner commands, which are listed beside it):\n\n| path | server µs per op | commands per op |\n|---|---|---|\n")
			for _, st := range []struct {
				name string
				t    *RedisOpTime
			}{{"replay", rt.Replay}, {"first request", rt.First}} {
				p("| %s | %.1f | %s |\n", st.name, st.t.ServerUs, commandList(st.t.Commands))
			}
			p("\n")
		}
		if len(h.Throughput8) > 0 {
			p("**Eight clients**, throughput of replays against the floor through one pool of 8 connections (PostgreSQL) and the Redis client:\n\n%s\n", sideTable(h.Throughput8, 0, true))
			if len(h.Throughput8Redis) > 0 {
				p("%s\n", sideTable(h.Throughput8Redis, 0, true))
			}
		}
	}
	if d := r.Delay; d != nil {
		p("## 1c. Through a network delay\n\n")
		p("The floor, a replay and a first request through a TCP proxy on loopback that holds every chunk %.1f ms in each direction (the order of a Lambda → RDS Proxy → Aurora hop), exec mode. Round trips dominate here: a replay is one, a first request two.\n\n", d.DelayMs)
		p("**PostgreSQL**\n\n%s\n", sideTable(d.Postgres, 0, false))
		if len(d.Redis) > 0 {
			p("**Redis**\n\n%s\n", sideTable(d.Redis, 0, false))
		}
	}
	if f := r.Fingerprint; f != nil {
		p("## 1d. Fingerprint allocations\n\n")
		p("`idempotency.Fingerprint` on a POST whose body is a JSON array of zeros (`[0,0,…]`), through the package's public API (`testing.Benchmark`).\n\n| body | bytes | allocations per call | bytes allocated per call | × body size | ms per call |\n|---|---|---|---|---|---|\n")
		for _, s := range f.Sizes {
			p("| %s | %d | %d | %d | %.1f× | %.3f |\n", s.Label, s.BodyBytes, s.AllocsPerOp, s.BytesPerOp, s.BytesOverIn, float64(s.NsPerOp)/1e6)
		}
		p("\n")
	}
	if br := r.Beyond; br != nil {
		p("## 1e. Past the round-trip floor: local cache, waiting duplicates\n\n")
		p("A replay answered from the local cache (`Config.LocalCache`: a completed record kept in the execution environment) makes no round trip, against the floor and the store's replay, one client, exec mode (ADR 0097). The calls carry a deadline, as a Lambda invocation does, so no heartbeat runs. The sides are measured turn by turn: each turn calls every side once, in an order that rotates, so that the floor and what is compared with it meet the machine in the same moments (on a virtual machine a loopback round trip can change speed severalfold from one second to the next, as idle cores sleep and wake: see How noisy the machine was); a side's ops/s is that of its own calls. A ratio to such a floor is smaller when the floor is slow, since what a cached replay or the client adds to a round trip slows down less than the round trip does, or not at all: read each ratio with the floor's own figure beside it.\n\n")
		p("**PostgreSQL**\n\n%s\n", sideTable(br.Postgres, 0, false))
		if len(br.Redis) > 0 {
			p("**Redis** (with the first request, whose client-side cost item 5 of the work is about)\n\n%s\n", sideTable(br.Redis, 0, false))
			if fl, c := side(br.Redis, "floor (PING)"), side(br.Redis, "replay (local cache)"); fl != nil && c != nil {
				p("Against `PING`, the cheapest round trip here, a cached replay is %s at p50 (repetitions %s); the cache's target is set against `SELECT 1` (see Targets).\n\n", fx(ratio(c.P50Ms, fl.P50Ms)), repRatios(c, fl))
			}
		}
		if len(br.Valkey) > 0 {
			p("**Valkey 8.1** (the same sides; the store completes a record with one `SET … IFEQ` here, where Redis 7.0 needs its script: ADR 0101)\n\n%s\n", sideTable(br.Valkey, 0, false))
		}
		if len(br.PostgresAwake) > 0 {
			p("**The same comparisons with the cores kept awake.** On this virtual machine an idle core sleeps, and a loopback round trip waits for the cores at both ends to wake; when the machine is busy, the same round trip is several times faster. So each comparison above runs a second time while a busy loop at the lowest priority (nice 19; `cmd/bench/awake.go`) keeps every core out of idle: the scheduler gives a core to a woken thread of normal priority, and the round trips are at their fastest. What the client adds to a round trip then weighs the most, and the targets are judged in this state too, at p50; a p99 here can include a wake-up that waited behind the loop for a scheduler tick, and is not comparable with the figures above.\n\n")
			p("PostgreSQL:\n\n%s\n", sideTable(br.PostgresAwake, 0, false))
			if len(br.RedisAwake) > 0 {
				p("Redis 7.0:\n\n%s\n", sideTable(br.RedisAwake, 0, false))
			}
			if len(br.ValkeyAwake) > 0 {
				p("Valkey 8.1:\n\n%s\n", sideTable(br.ValkeyAwake, 0, false))
			}
		}
		p("Memory: %d completed records of the bench's task answer (a %d-byte body and its Content-Type) held %.0f bytes of heap each in the cache, which counts %.0f bytes each against `LocalCache.MaxBytes` (default 8 MiB: about %d such records; `MaxEntries` defaults to 1024).\n\n",
			br.CacheRecords, len(benchTaskBody), br.CacheBytesPerRecord, br.CacheCountedPerRecord, int(float64(8<<20)/br.CacheCountedPerRecord))
		if c := br.Create; c != nil {
			p("The sample create (POST /tasks: the task API's handler under `Wrap` on PostgreSQL, exec mode) through the delay proxy (%.1f ms each way), its key completed by the decorator after the insert (three round trips: claim, insert, completion; three commits) and in the insert's own batch (`tasks.Options.Keys`, `pgstore.CompleteRunInBatch`: the task's id and times made by the function; two round trips, two commits). Round trips counted with a pgx tracer (a batch is one).\n\n%s\n", c.DelayMs, sideTable(c.Sides, 0, false))
			p("| create | round trips per create |\n|---|---|\n")
			for _, s := range c.Sides {
				p("| %s | %.2f |\n", s.Name, c.RoundTrips[s.Name])
			}
			p("\n")
		}
		if len(br.Waits) > 0 {
			p("A waiting duplicate (`Config.WaitForResult`) polls the store with one claim a poll, 20 ms growing by half to 500 ms between them. The extra store load it causes, on PostgreSQL, for a first request that runs for:\n\n| first request runs | claims by the duplicate (first + polls) | waited (ms) | claims per second | answer |\n|---|---|---|---|---|\n")
			for _, w := range br.Waits {
				answer := "replay of the first request"
				if !w.Replayed {
					answer = "not the replay"
				}
				p("| %.0f ms | %d | %.0f | %.1f | %s |\n", w.HandlerMs, w.Claims, w.WaitedMs, w.ClaimsPerSec, answer)
			}
			p("\nEach poll is a replay's claim (one round trip, no write): the load is that of a client retrying on its own, bounded at 2 claims a second once the pause reaches 500 ms.\n\n")
		}
	}
}

// idleCached is the cached replay of section 1e's PostgreSQL comparison on
// the machine as it is, in µs.
func idleCached(br *BeyondResult) string {
	if c := side(br.Postgres, "replay (local cache)"); c != nil {
		return fmt.Sprintf("%.1f µs", 1000*c.P50Ms)
	}
	return "not measured"
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no (direct only)"
}

func serverCell(t *PGServerTime) string {
	if t == nil {
		return "—"
	}
	return fmt.Sprintf("**%.1f** (%.1f + %.1f)", t.TotalUs, t.PlanUs, t.ExecUs)
}

func minCell(a, b *PGServerTime) string {
	if a == nil || b == nil {
		return "—"
	}
	return fmt.Sprintf("%.1f / %.1f", a.MinUs, b.MinUs)
}

func commandList(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for k, v := range m {
		if v >= 0.01 {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// missedMarkdown explains, for each target this run missed, where the time
// goes and the floor it stands against, from this run's own figures.
func (b *bench) missedMarkdown(w *strings.Builder) {
	r := b.res
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	var missed []Target
	for _, t := range r.Targets {
		if t.Met != nil && !*t.Met {
			missed = append(missed, t)
		}
	}
	if len(missed) == 0 {
		return
	}
	p("## Targets missed: where the time goes\n\n")
	var exec *ModeResult
	var prepared *ModeResult
	if h := r.HotPath; h != nil {
		for i := range h.Modes {
			switch h.Modes[i].Mode {
			case "exec":
				exec = &h.Modes[i]
			case "cache statement (prepared)":
				prepared = &h.Modes[i]
			}
		}
	}
	for _, t := range missed {
		p("- **%s** (target %s, this run %s). ", t.What, t.Target, t.Value)
		switch {
		case strings.HasPrefix(t.What, "Added over the floor of its pool"):
			b.poolFloorMissed(w)
		case strings.Contains(t.What, "vs gopotency's") || strings.Contains(t.What, "vs idemlease's"):
			b.directMissed(w, t)
		case strings.HasPrefix(t.What, "Local cache"):
			p("A cached replay makes no round trip: what is left is the decorator's own work on the request (the view, the fingerprint), the JSON log line and the EMF line, about 4 µs in a hot loop (BenchmarkWrapReplayCached, pkg/idempotency), of which about a third is the log line, which the work item requires on every hit (BenchmarkWrapReplayCachedQuiet is the same replay with the logger's level above Info)")
			if br := r.Beyond; br != nil {
				p("; in this section, where each replay follows a round trip and meets cold caches, it took %s with idle cores", idleCached(br))
			}
			p(". The floor here is a loopback round trip")
			if d, br := r.Delay, r.Beyond; d != nil && br != nil {
				floors, name, cached := d.Postgres, "floor (SELECT 1)", side(br.Postgres, "replay (local cache)")
				if strings.Contains(t.What, "Redis") {
					floors, name, cached = d.Redis, "floor (PING)", side(br.Redis, "replay (local cache)")
				}
				if fl := side(floors, name); fl != nil && cached != nil {
					p("; through the %.1f ms-each-way delay of section 1c, the floor is %.3f ms, and the same cached replay is %.4f× of it", d.DelayMs, fl.P50Ms, ratio(cached.P50Ms, fl.P50Ms))
				}
			}
			if br := r.Beyond; br != nil && strings.HasSuffix(t.What, "cores kept awake") {
				if fl, c := side(br.PostgresAwake, "floor (SELECT 1)"), side(br.PostgresAwake, "replay (local cache)"); fl != nil && c != nil {
					p(". With the cores kept awake the floor is %.3f ms, so the target asks for a cached replay of %.1f µs, log line included, after a round trip; it took %.1f µs (%s with idle cores): the floor falls severalfold when the cores stay awake, the replay's own work much less", fl.P50Ms, 100*fl.P50Ms, 1000*c.P50Ms, idleCached(br))
				}
			}
			p(".\n")
		case strings.HasPrefix(t.What, "Redis first request") && strings.Contains(t.What, "Valkey"):
			p("Two round trips, both plain commands: the claim's `SET … NX GET` and the completion's `SET … IFEQ`, each a few microseconds of server time (`go test -bench 'Ping$|ClaimNew$|Complete$' ./pkg/idempotency/redisstore` reports the server's time per command). What is left over two `PING`s is the client's work: go-redis's command path, the store's encoding of the record, and the decorator's own work on the request (BenchmarkWrapFirstRequest, pkg/idempotency), which weighs more the faster the loopback is.\n")
		case strings.HasPrefix(t.What, "Redis first request"):
			p("Two round trips, the claim's `SET … NX GET` and the completion's `EVALSHA`. The script (read the record, check its owner and status, rewrite it) costs about 9–15 µs of server time (it read the record's two times too, until it no longer did: 1–4 µs more) where Valkey 8.1's `SET … IFEQ` costs 3–4 µs (`go test -bench 'Complete$' ./pkg/idempotency/redisstore`, which reports the server's time per command). Redis 7.0 has no command that writes only when the stored value is the one expected, and a completion that is not fenced by the owner token could overwrite another run's record, so the script stays there (ADR 0101). Compare the Valkey row.\n")
		case strings.HasPrefix(t.What, "PostgreSQL: replay") || strings.HasPrefix(t.What, "PostgreSQL: first"):
			if f := r.Floor; f != nil {
				fl, rep, first, alone, shape := side(f.Postgres, "floor (SELECT 1)"), side(f.Postgres, "replay"), side(f.Postgres, "first request"), side(f.Postgres, "claim alone (completed key)"), side(f.Postgres, noopShapeName)
				if fl != nil && rep != nil && first != nil && alone != nil {
					p("At p50 the floor is %.3f ms; the claim statement alone adds %.3f ms to it and the decorator (fingerprint, log and metric lines) %.3f ms; a first request is two round trips (%.3f ms). ",
						fl.P50Ms, alone.P50Ms-fl.P50Ms, rep.P50Ms-alone.P50Ms, first.P50Ms)
				}
				if fl != nil && shape != nil {
					p("A function that does nothing, called with the claim's seven arguments, is already %s the floor (%.3f ms): the driver's encoding of the arguments, their parsing and the call's planning on the server, before any row is read. ", fx(ratio(shape.P50Ms, fl.P50Ms)), shape.P50Ms)
					if strings.HasPrefix(t.What, "PostgreSQL: first") {
						p("A first request is two such calls, so two no-op calls would already be %s, before its two write transactions. ", fx(2*ratio(shape.P50Ms, fl.P50Ms)))
					}
				}
			}
			if exec != nil && exec.Replay != nil && exec.First != nil {
				p("The server spends %.1f µs per replay and %.1f µs per first request (fastest calls %.1f / %.1f µs)", exec.Replay.TotalUs, exec.First.TotalUs, exec.Replay.MinUs, exec.First.MinUs)
				if exec.Floor != nil {
					p(" against %.1f µs for `SELECT 1`", exec.Floor.TotalUs)
				}
				p(": a PL/pgSQL call that reads (and for a first request writes and commits) a row, where the floor does nothing. ")
			}
			p("With a network between function and database the ratio shrinks towards the round-trip count (section 1c).\n")
		case strings.HasPrefix(t.What, "PostgreSQL server time"):
			if exec != nil && exec.Replay != nil && exec.First != nil {
				p("Per call, planning the one-line function call costs %.1f µs and its execution %.1f µs (replay; first request %.1f + %.1f). ", exec.Replay.PlanUs, exec.Replay.ExecUs, exec.First.PlanUs, exec.First.ExecUs)
			}
			if exec != nil && exec.NoopShape != nil {
				p("A function with the same seven arguments that does nothing costs %.1f µs (%.1f + %.1f; fastest %.1f): that much of the budget is gone before the function reads a row. ", exec.NoopShape.TotalUs, exec.NoopShape.PlanUs, exec.NoopShape.ExecUs, exec.NoopShape.MinUs)
			}
			if prepared != nil && prepared.Replay != nil && prepared.First != nil {
				p("On a direct connection, where named prepared statements are kept (no proxy here can carry them), the claim is a prepared plain read that calls the function only on a miss: %.1f / %.1f µs (fastest %.1f / %.1f; section 1f). ", prepared.Replay.TotalUs, prepared.First.TotalUs, prepared.Replay.MinUs, prepared.First.MinUs)
			}
			p("What is left is one primary-key read through a plan cached in the function (replay), or that read, an `INSERT … ON CONFLICT` and an `UPDATE` of a row in two indexes, and two commits (first request), plus the `SET enable_seqscan = off` guard of ADR 0025. ")
			if exec != nil && exec.Unguarded != nil && exec.Replay != nil {
				p("Without the guard the same replay costs %.1f µs (fastest %.1f, against %.1f with it): the guard is what keeps a cached plan from turning into a sequential scan (section 1b). ", exec.Unguarded.TotalUs, exec.Unguarded.MinUs, exec.Replay.MinUs)
			}
			if exec != nil && exec.PlainRead != nil {
				p("The same primary-key read sent as a plain statement, planned on every call as a proxy-safe mode must, costs %.1f µs (%.1f planning + %.1f execution; fastest %.1f): planning alone is more than the target, which is why the claim behind a proxy is a function. ", exec.PlainRead.TotalUs, exec.PlainRead.PlanUs, exec.PlainRead.ExecUs, exec.PlainRead.MinUs)
			}
			p("Times inside the server are wall-clock, so a busy machine inflates them; the fastest calls are the better estimate of the floor.\n")
		case strings.HasPrefix(t.What, "Redis: replay") || strings.HasPrefix(t.What, "Redis: first"):
			if f := r.Floor; f != nil {
				fl, rep, alone := side(f.Redis, "floor (PING)"), side(f.Redis, "replay"), side(f.Redis, "claim alone (completed key)")
				if fl != nil && rep != nil && alone != nil {
					p("`PING` is %.3f ms; the claim alone adds %s (its command, the record's bytes and their decoding) and the decorator %s. ", fl.P50Ms, addedMs(alone.P50Ms-fl.P50Ms), addedMs(rep.P50Ms-alone.P50Ms))
				}
			}
			if h := r.HotPath; h != nil && h.Redis != nil && h.Redis.Replay != nil && h.Redis.First != nil {
				p("Server time is %.1f µs per replay (%s) and %.1f µs per first request (%s), from `INFO commandstats`; the rest is the client's: the call and its reply, and the decorator's own work. A first request is two round trips, so it cannot come under 2× `PING` at any server cost.\n",
					h.Redis.Replay.ServerUs, commandList(h.Redis.Replay.Commands), h.Redis.First.ServerUs, commandList(h.Redis.First.Commands))
			} else {
				p("\n")
			}
		case strings.HasPrefix(t.What, "8 clients"):
			p("Eight clients on %d CPUs shared with the server are CPU-bound: throughput is the inverse of the CPU a call costs on both sides together. ", r.Machine.CPUs)
			if exec != nil && exec.Replay != nil && exec.Floor != nil {
				p("A replay costs the server %.1f µs against %.1f µs for `SELECT 1`, and the client the decorator's work on top of the driver's. ", exec.Replay.TotalUs, exec.Floor.TotalUs)
				if exec.NoopShape != nil {
					p("Even a call of the claim's shape that does nothing costs the server %.1f µs, %s what `SELECT 1` does, and at one client it is already %s slower (section 1), before the replay's read. ", exec.NoopShape.TotalUs, fx(ratio(exec.NoopShape.TotalUs, exec.Floor.TotalUs)), noopLatencyRatio(r))
				}
			}
			p("\n")
		case strings.HasPrefix(t.What, "POST /tasks"):
			p("The wrapped handler adds a claim and a completion (two round trips, two PL/pgSQL calls, two commits) to the handler's own insert; on a CPU-bound loopback run the ratio is the CPU those cost against the unwrapped request. ")
			if f := r.Floor; f != nil {
				if first := side(f.Postgres, "first request"); first != nil {
					p("At one client, those two round trips and the decorator around a handler that does nothing take %.3f ms (section 1)", first.P50Ms)
					if exec != nil && exec.First != nil {
						p(", of which the server %.0f µs", exec.First.TotalUs)
					}
					p(". ")
				}
			}
			p("Completing the key in the handler's own transaction (pgstore's CompleteRunInTx) would save a round trip and a commit, but the sample's insert returns the id and times the stored response holds (ADR 0028).\n")
		default:
			p("Outside the hot path this work changed; on a machine this noisy (calibration CV %.0f%%) its p99 figures move with the noise: see section 4.\n", r.Noise.CVPct)
		}
	}
	p("\n")
}

// noopLatencyRatio is the no-op call of the claim's shape against SELECT 1
// at one client (section 1), or "n/a".
func noopLatencyRatio(r *Results) string {
	if r.Floor == nil {
		return "n/a"
	}
	fl, shape := side(r.Floor.Postgres, "floor (SELECT 1)"), side(r.Floor.Postgres, noopShapeName)
	if fl == nil || shape == nil {
		return "n/a"
	}
	return fx(ratio(shape.P50Ms, fl.P50Ms))
}

// addedMs is a difference of two medians as the time one part adds; one
// at or under zero is within this run's noise.
func addedMs(d float64) string {
	if d <= 0 {
		return "nothing measurable in this run"
	}
	return fmt.Sprintf("%.3f ms", d)
}
