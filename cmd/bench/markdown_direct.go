package main

import (
	"fmt"
	"strings"
)

// directMarkdown renders section 1f.
func (b *bench) directMarkdown(w *strings.Builder) {
	d := b.res.Direct
	if d == nil {
		return
	}
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("## 1f. A direct connection, and the peers' statements\n\n")
	p("On a direct connection (no pooler between client and server) pgstore keeps named prepared statements when the pool does (pgx's `QueryExecModeCacheStatement`; `dbpool.QueryModePrepared`, `DB_QUERY_MODE=prepared`). Its claim is then a plain statement, the replay's primary-key read, that calls the claim function only when it finds no record that counts as present; the server keeps its plan, made once per connection with sequential scans off (docs/connection.md). *exec mode* is the proxy-safe path of the deployed default, unchanged. The decorator's replay and first request are measured as in section 1.\n\n")
	p("**The peers.** gopotency v1.0.0 and idemlease v1.1.0 are Go modules that the Go module proxy does not serve here, so the libraries themselves cannot run in this harness. In their place run the statements each sends to PostgreSQL on the same path, as their sources write them, on tables of the schemas their documentation gives, through `database/sql` and pgx's driver for it (its default mode prepares statements; through pgbouncer, its exec mode). gopotency's replay is one `SELECT` by the key, its first request six statements (read, lock, pending record, read, completed record, unlock); idemlease's replay is an `INSERT … ON CONFLICT` that meets the record and a `SELECT` of it, its first request a reserving `INSERT` and a completing `UPDATE`. What the libraries do around their statements in Go (decoding a JSON record, hashing the request, their middleware) is not run, so each peer side is a **lower bound of that library's time**: a target met against it is met against the library; a target missed against it is not decided. They are compared with ichido's store calls alone (*ichido store: …*, the claim of a completed key; the claim and completion of a new one), likewise without the decorator's work around them; the decorator's replay and first request are shown beside them.\n\n")
	p("Ratios are taken per repetition (the sides of one repetition run interleaved), and each cell gives their median and range.\n\n")

	states := []struct {
		label      string
		one, eight []Side
	}{{"as the machine is", d.One, d.Eight}, {"with the cores kept awake (section 1e)", d.OneAwake, d.EightAwake}}
	for _, st := range states {
		if len(st.one) == 0 {
			continue
		}
		p("**One client, %s**\n\n%s\n", st.label, sideTable(st.one, 0, false))
		p("%s\n", pairedTable(st.one, runP50, "p50", [][2]string{
			{sideStoreReplay, sideGopotReplay}, {sideStoreReplay, sideLeaseReplay}, {sideReplayPrepared, sideReplayExec},
			{sideStoreFirst, sideGopotFirst}, {sideStoreFirst, sideLeaseFirst}, {sideFirstPrepared, sideFirstExec},
		}))
	}
	if len(d.Server) > 0 {
		p("**Server time per replay**, from `pg_stat_statements` as in section 1b (one client, consecutive operations), and the claim statement on its own in its two forms on a direct connection: the claim function called through a prepared statement, and pgstore's prepared read that calls the function only on a miss.\n\n| side | server µs per replay (plan + exec) | fastest calls (µs) | statements |\n|---|---|---|---|\n")
		for _, name := range []string{sideReplayExec, sideReplayPrepared, sideGopotReplay, sideLeaseReplay, sideClaimFunction, sideClaimRead} {
			t := d.Server[name]
			if t == nil {
				continue
			}
			var stmts []string
			for _, s := range t.Statements {
				stmts = append(stmts, fmt.Sprintf("%.2f × %.1f µs", s.CallsPerOp, s.PlanUsPerCall+s.ExecUsPerCall))
			}
			p("| %s | %s | %.1f | %s |\n", name, serverCell(t), t.MinUs, strings.Join(stmts, ", "))
		}
		if f, r := d.Server[sideClaimFunction], d.Server[sideClaimRead]; f != nil && r != nil {
			p("\nThe prepared read costs the server %.1f µs per replay where the prepared function call costs %.1f (fastest calls %.1f and %.1f): the function's own work (PL/pgSQL's call, its per-transaction setup of its expressions, the `SET enable_seqscan = off` of every call) is what a plain statement does not pay. On a miss the read finds nothing and the function claims, as in exec mode.\n", r.TotalUs, f.TotalUs, r.MinUs, f.MinUs)
		}
		p("\n")
	}
	for _, st := range states {
		if len(st.eight) == 0 {
			continue
		}
		p("**Eight clients, %s**: one pool of 8 connections per side (database/sql for the peers).\n\n%s\n", st.label, sideTable(st.eight, 0, true))
		p("%s\n", pairedTable(st.eight, runThroughput, "requests/s", [][2]string{
			{sideStoreReplay, sideGopotReplay}, {sideStoreReplay, sideLeaseReplay}, {sideReplayPrepared, sideReplayExec},
		}))
	}
	if len(d.Bouncer) > 0 {
		p("**Through pgbouncer** (%s, transaction pooling), where only the proxy-safe modes work: ichido in exec mode, the peers' statements in pgx's exec mode. One client:\n\n%s\n", d.BouncerVersion, sideTable(d.Bouncer, 0, false))
		p("%s\n", pairedTable(d.Bouncer, runP50, "p50", [][2]string{{sideStoreReplay, sideGopotReplay}, {sideStoreReplay, sideLeaseReplay}}))
		if len(d.Bouncer8) > 0 {
			p("Eight clients:\n\n%s\n", sideTable(d.Bouncer8, 0, true))
			p("%s\n", pairedTable(d.Bouncer8, runThroughput, "requests/s", [][2]string{{sideStoreReplay, sideGopotReplay}, {sideStoreReplay, sideLeaseReplay}}))
		}
	} else if d.BouncerError != "" {
		p("pgbouncer was not measured: %s\n\n", d.BouncerError)
	}
	for _, st := range []struct {
		label string
		sides []Side
	}{{"as the machine is", d.Redis}, {"with the cores kept awake", d.RedisAwake}} {
		if len(st.sides) == 0 {
			continue
		}
		if st.label == "as the machine is" {
			p("**Redis 7.0**, where the store completes a record with its script (ADR 0101), beside the commands idemlease's Redis store sends for the same paths (`internal/testkit/peers`: a reservation script that answers a live record's fields or writes a hash of four fields, a completion script that checks the token and state and writes three fields; both by EVALSHA), one client. A first request is two round trips on each side, a replay one.\n\n")
		}
		p("Redis 7.0, one client, %s:\n\n%s\n", st.label, sideTable(st.sides, 0, false))
		p("%s\n", pairedTable(st.sides, runP50, "p50", [][2]string{{sideStoreFirst, sideLeaseRedisFirst}, {sideStoreReplay, sideLeaseRedisReplay}}))
	}
	if len(d.Redis) > 0 {
		p("Where the first requests differ (`go test -run '^$' -bench PeerShape ./pkg/idempotency/redisstore`, which also counts bytes, round trips and each side's CPU): the claim's `SET … NX GET` costs the server about 12 µs less than the peer's reservation script, and the client about 3–6 µs more, because a free key answers nil, which go-redis turns into an error and runs its retry and connection checks on; nil is the claim's success, so the store cannot avoid it, and a pipeline or a script that never answers nil costs more than it saves. The two completions are within about 2 µs of each other: the store's script reads only the status and the owner of the record it checks (it decoded the two times too, which cost 1–4 µs of server time).\n\n")
	}
	if pr := d.Profile; pr != nil {
		p("**Where a replay's time goes** (%s, %d clients, %d replays in %.1f s, CPU profile on; the profile is `docs/performance/replay-profile.pb.gz`, for `go tool pprof`). On 2 CPUs shared by client and server, eight clients are CPU-bound, and requests/s is the inverse of the CPU a replay costs on both sides together: ", pr.Side, pr.Clients, pr.Ops, pr.Seconds)
		if pr.ServerUs > 0 {
			p("%.1f µs on the client (this process, `getrusage`) and %.1f µs on the server (the backends that served the pool, `/proc`), %.1f µs in all.", pr.ClientUs, pr.ServerUs, pr.ClientUs+pr.ServerUs)
			if pr.ServerStatementUs > 0 {
				p(" Of the server's, %.1f µs (wall-clock, so including waits for a CPU) is inside the statement (`pg_stat_statements`: planning and execution); the rest is the protocol (reading the call, binding its seven parameters, sending the answer), the transaction around the statement, and the backend's system calls.", pr.ServerStatementUs)
			}
		} else {
			p("%.1f µs on the client (this process, `getrusage`); the server's was not read (%s).", pr.ClientUs, pr.ServerNote)
		}
		p(" The client's, by what its profile samples were doing (a sample goes to the innermost frame that names a part):\n\n| client part | µs per replay | share |\n|---|---|---|\n")
		for _, s := range pr.Client {
			p("| %s | %.1f | %.0f%% |\n", s.Part, s.Us, s.Share)
		}
		p("\n")
	}
}

// pairedTable shows, for each pair of sides, f's ratio per repetition.
func pairedTable(ss []Side, f func(Run) float64, what string, pairs [][2]string) string {
	var w strings.Builder
	fmt.Fprintf(&w, "| %s of | against | median ratio | per repetition |\n|---|---|---|---|\n", what)
	for _, pair := range pairs {
		a, b := side(ss, pair[0]), side(ss, pair[1])
		if a == nil || b == nil {
			continue
		}
		xs := pairedRatios(a, b, f)
		if len(xs) == 0 {
			continue
		}
		var each []string
		for i := range min(len(a.Runs), len(b.Runs)) {
			each = append(each, fmt.Sprintf("%.2f", ratio(f(a.Runs[i]), f(b.Runs[i]))))
		}
		fmt.Fprintf(&w, "| %s | %s | %s | %s |\n", pair[0], pair[1], fx(median(xs)), strings.Join(each, ", "))
	}
	return w.String()
}

// directMissed explains a target of section 1f that this run missed.
func (b *bench) directMissed(w *strings.Builder, t Target) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	d := b.res.Direct
	p("The peer's side is its statements or commands alone, a lower bound of the library's time, so a miss here does not decide how ichido compares with the library: the Go module proxy does not serve the peers, and `make bench-peers` runs gopotency itself, built from its source, beside ichido's replay ([performance-peers.md](performance-peers.md)). ")
	switch {
	case strings.Contains(t.What, "8 clients"):
		p("Eight clients on 2 CPUs shared with the server are CPU-bound, and requests/s is the inverse of the CPU a call costs on both sides. The peer's side is one `SELECT` of one parameter returning two columns; the store's claim binds seven parameters (the function needs them on a miss), answers through a `CASE` over the record and converts the JSONB envelope to text, and the client decodes the envelope into a response. ")
		if pr := d.Profile; pr != nil && pr.ServerUs > 0 {
			p("Through the decorator a replay costs %.1f µs of CPU on the client and %.1f µs on the server (section 1f, *Where a replay's time goes*). ", pr.ClientUs, pr.ServerUs)
		}
	case strings.Contains(t.What, "pgbouncer"):
		p("Through the pooler the store sends the one-line function call on the unnamed statement, parsed and planned on every call (the proxy-safe path, unchanged by this run's work); the peer's `SELECT` is planned on every call too, and is the cheaper plan. ")
	case strings.Contains(t.What, "Redis"):
		p("The store's claim costs the server less than the peer's reservation script and the client more: a free key answers nil, which go-redis handles as an error (section 1f). ")
	default:
		if r, g := d.Server[sideClaimRead], d.Server[sideGopotReplay]; r != nil && g != nil {
			p("The store's claim costs the server %.1f µs (fastest %.1f) against %.1f µs (fastest %.1f) for the peer's statement; ", r.TotalUs, r.MinUs, g.TotalUs, g.MinUs)
		}
		p("with the cores kept awake a round trip is at its fastest and what each client adds weighs the most: pgx's encoding of seven parameters and the envelope's decoding against one parameter and two columns. ")
	}
	p("\n")
}
