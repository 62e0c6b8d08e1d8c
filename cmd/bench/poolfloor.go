package main

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// PoolFloorResult is section 1g: `SELECT 1` through each way a Go program
// reaches PostgreSQL, side by side, beside the replay on a direct
// connection and gopotency's stand-in, at one and eight clients, and where
// each floor's client CPU goes.
type PoolFloorResult struct {
	One   []Side `json:"one"`
	Eight []Side `json:"eight"`
	// Profiles split each side's client CPU at eight clients.
	Profiles []*ReplayProfile `json:"profiles,omitempty"`
}

// The floors of section 1g.
const (
	sideFloorExec     = "SELECT 1: dbpool, exec mode"
	sideFloorPrepared = "SELECT 1: dbpool, prepared mode"
	sideFloorPgxpool  = "SELECT 1: pgxpool, its defaults"
	sideFloorConn     = "SELECT 1: one pgx connection per client"
	sideFloorSQL      = "SELECT 1: database/sql, pgx's driver"
)

// poolFloor measures section 1g.
func (b *bench) poolFloor(ctx context.Context) error {
	res := &PoolFloorResult{}
	b.res.PoolFloor = res
	if err := b.db.peerTables(ctx); err != nil {
		return fmt.Errorf("the peers' tables: %w", err)
	}
	for _, clients := range []int{1, 8} {
		specs, closeAll, err := b.poolFloorSides(ctx, clients)
		if err != nil {
			return err
		}
		p := plan{reps: b.cfg.reps, clients: clients, dur: b.cfg.floorDur, maxOps: b.cfg.maxOps, warm: b.cfg.warm}
		sides, err := compare(ctx, p, specs)
		if err == nil {
			logSides(fmt.Sprintf("pool floors, %d clients", clients), sides)
			if clients == 1 {
				res.One = sides
			} else {
				res.Eight = sides
				for _, s := range specs {
					pr, err := b.profileSide(ctx, s, clients)
					if err != nil {
						log.Printf("profile of %s: %v", s.name, err)
						continue
					}
					res.Profiles = append(res.Profiles, pr)
				}
			}
		}
		closeAll()
		if err != nil {
			return err
		}
	}
	return nil
}

// poolFloorSides opens the pools of one client count and returns the
// sides: the five floors, then the replay and the store's claim in the
// prepared mode and gopotency's replay statements.
func (b *bench) poolFloorSides(ctx context.Context, clients int) ([]sideSpec, func(), error) {
	conns := int32(max(clients, 2))
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	fail := func(err error) ([]sideSpec, func(), error) {
		closeAll()
		return nil, nil, err
	}
	open := func(mode dbpool.QueryMode) (*pgxpool.Pool, error) {
		p, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: b.db.url, MaxConns: conns, QueryMode: mode})
		if err == nil {
			closers = append(closers, p.Close)
		}
		return p, err
	}
	execPool, err := open(dbpool.QueryModeExec)
	if err != nil {
		return fail(err)
	}
	prepPool, err := open(dbpool.QueryModePrepared)
	if err != nil {
		return fail(err)
	}
	pc, err := pgxpool.ParseConfig(b.db.url)
	if err != nil {
		return fail(err)
	}
	pc.MaxConns = conns
	plain, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return fail(err)
	}
	closers = append(closers, plain.Close)
	single := make([]*pgx.Conn, clients)
	for i := range single {
		if single[i], err = pgx.Connect(ctx, b.db.url); err != nil {
			return fail(err)
		}
		c := single[i]
		closers = append(closers, func() { _ = c.Close(context.Background()) })
	}
	peers, err := newPeerStatements(ctx, b.db.url, int(conns), "")
	if err != nil {
		return fail(fmt.Errorf("the peers' statements: %w", err))
	}
	closers = append(closers, func() { peers.db.Close() })
	prepStore := mustStore(pgstore.New(prepPool, nil))
	prepSides, err := b.decoratorSides(ctx, prepStore)
	if err != nil {
		return fail(err)
	}
	storeReplay, err := primed(ctx, claimAloneSide(prepStore))
	if err != nil {
		return fail(err)
	}
	selectOne := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) op {
		return func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error {
				var n int
				return q.QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}
	}
	specs := []sideSpec{
		{sideFloorExec, selectOne(execPool)},
		{sideFloorPrepared, selectOne(prepPool)},
		{sideFloorPgxpool, selectOne(plain)},
		{sideFloorConn, func(ctx context.Context, worker int) (time.Duration, error) {
			return timed(func() error {
				var n int
				return single[worker].QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}},
		{sideFloorSQL, sqlSelectOne(peers.db)},
		named(prepSides[0], sideReplayPrepared),
		named(storeReplay, sideStoreReplay),
	}
	specs = append(specs, peers.sides()[0]) // gopotency's replay
	return specs, closeAll, nil
}

func sqlSelectOne(db *sql.DB) op {
	return func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			var n int
			return db.QueryRowContext(ctx, "SELECT 1").Scan(&n)
		})
	}
}

// poolFloorProfileFile is the raw CPU profile of the replay at eight
// clients in section 1g.
const poolFloorProfileFile = "poolfloor-replay-profile.pb.gz"

// profileSide runs s on clients clients for a few seconds with the CPU
// profiler on, and splits the client's CPU per operation by part.
func (b *bench) profileSide(ctx context.Context, s sideSpec, clients int) (*ReplayProfile, error) {
	dur := 3 * time.Second
	if b.cfg.quick {
		dur = time.Second
	}
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	before := rusageCPU()
	start := time.Now()
	run := load(ctx, clients, dur, b.cfg.maxOps, s.op)
	elapsed := time.Since(start)
	cpu := rusageCPU() - before
	pprof.StopCPUProfile()
	if run.Ops == 0 {
		return nil, fmt.Errorf("nothing ran: %s", run.FirstError)
	}
	pr := &ReplayProfile{Side: s.name, Clients: clients, Ops: run.Ops, Seconds: elapsed.Seconds(),
		ClientUs: float64(cpu.Microseconds()) / float64(run.Ops)}
	raw := buf.Bytes()
	p, err := profile.Parse(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("reading the profile: %w", err)
	}
	pr.Client = splitProfile(p, pr.ClientUs)
	if s.name == sideReplayPrepared && b.plots != "" {
		// Kept beside the report, for `go tool pprof`.
		if err := os.WriteFile(filepath.Join(b.plots, poolFloorProfileFile), raw, 0o644); err != nil {
			return nil, err
		}
	}
	return pr, nil
}

// poolFloorTargets judges section 1g: what the replay adds over the
// prepared `SELECT 1` of its pool against what gopotency's stand-in adds
// over database/sql's, at one client (p50) and at eight (CPU time per
// operation, the inverse of requests/s).
func (r *Results) poolFloorTargets(add func(item, what, target, value string, ok *bool)) {
	f := r.PoolFloor
	if f == nil {
		return
	}
	for _, who := range []string{sideReplayPrepared, sideStoreReplay} {
		one := floorAdded(f.One, who, runP50, false)
		eight := floorAdded(f.Eight, who, runThroughput, true)
		for _, c := range []struct {
			label, unit string
			xs          addedOver
		}{{"1 client, p50", "ms", one}, {"8 clients, time per request (1/req/s)", "µs", eight}} {
			if len(c.xs.mine) == 0 {
				continue
			}
			m, p := median(c.xs.mine), median(c.xs.peer)
			var reps []string
			for i := range c.xs.mine {
				reps = append(reps, fmt.Sprintf("%+.3f/%+.3f", c.xs.mine[i], c.xs.peer[i]))
			}
			add("1g", "Added over the floor of its pool: "+who+" over the prepared `SELECT 1`, against gopotency's replay statements over database/sql's `SELECT 1`, "+c.label,
				"at most as much", fmt.Sprintf("%+.3f vs %+.3f %s (medians; repetitions %s)", m, p, c.unit, strings.Join(reps, ", ")), met(m <= p))
		}
	}
}

// addedOver is, per repetition, what a side adds over its floor and what
// gopotency's stand-in adds over database/sql's floor, and their ratio.
type addedOver struct{ mine, peer []float64 }

// floorAdded pairs the repetitions of who and gopotency's stand-in with
// their floors. With inverse, f is a rate and the time per operation is
// 1e6/f µs.
func floorAdded(sides []Side, who string, f func(Run) float64, inverse bool) addedOver {
	var a addedOver
	me, floor, peer, peerFloor := side(sides, who), side(sides, sideFloorPrepared), side(sides, sideGopotReplay), side(sides, sideFloorSQL)
	if me == nil || floor == nil || peer == nil || peerFloor == nil {
		return a
	}
	val := func(r Run) float64 {
		if inverse {
			return 1e6 / f(r)
		}
		return f(r)
	}
	for i := range min(len(me.Runs), len(floor.Runs), len(peer.Runs), len(peerFloor.Runs)) {
		x, y := val(me.Runs[i])-val(floor.Runs[i]), val(peer.Runs[i])-val(peerFloor.Runs[i])
		a.mine, a.peer = append(a.mine, x), append(a.peer, y)
	}
	return a
}

// poolFloorMarkdown writes section 1g.
func (b *bench) poolFloorMarkdown(w *strings.Builder) {
	f := b.res.PoolFloor
	if f == nil {
		return
	}
	w.WriteString("## 1g. The floor of each pool\n\n")
	w.WriteString("`SELECT 1` through each way a Go program reaches PostgreSQL on a direct connection, side by side in one run: the package dbpool in its two query modes, pgxpool with its own defaults (no dbpool: pgx's default mode, which prepares and caches statements), one pgx connection per client (no pool), and database/sql with pgx's driver (its default mode prepares too; the peers' stand-ins run through it). Beside them, the decorator's replay and the store's claim of a completed key on the prepared dbpool pool, and gopotency's replay statement through database/sql. What a replay adds is measured over the floor of its own pool, and gopotency's stand-in over database/sql's.\n\n")
	fmt.Fprintf(w, "**One client**\n\n%s\n", sideTable(f.One, 1, false))
	if len(f.Eight) > 0 {
		fmt.Fprintf(w, "**Eight clients**, one pool of 8 connections per side (8 connections of its own for the single-connection side)\n\n%s\n", sideTable(f.Eight, 1, true))
	}
	if len(f.Profiles) > 0 {
		fmt.Fprintf(w, "\n**Where each side's client CPU goes** (eight clients, CPU profile on, this process's CPU time per operation, split by what the profile's samples were doing; the replay's profile is `docs/performance/%s`, for `go tool pprof`):\n\n", poolFloorProfileFile)
		w.WriteString("| side | µs per op | the largest parts |\n|---|---|---|\n")
		for _, p := range f.Profiles {
			var parts []string
			for i, s := range p.Client {
				if i == 5 {
					break
				}
				parts = append(parts, fmt.Sprintf("%s %.1f", s.Part, s.Us))
			}
			fmt.Fprintf(w, "| %s | %.1f | %s |\n", p.Side, p.ClientUs, strings.Join(parts, "; "))
		}
	}
	w.WriteString("\n")
}

// poolFloorMissed explains a missed target of section 1g from the run's
// own figures.
func (b *bench) poolFloorMissed(w *strings.Builder) {
	f := b.res.PoolFloor
	fl, sq := side(f.One, sideFloorPrepared), side(f.One, sideFloorSQL)
	me, st, peer := side(f.One, sideReplayPrepared), side(f.One, sideStoreReplay), side(f.One, sideGopotReplay)
	if fl != nil && sq != nil && me != nil && st != nil && peer != nil {
		fmt.Fprintf(w, "Each side is measured over the floor of its own pool, and the floors differ: at one client the prepared dbpool `SELECT 1` took %.3f ms and database/sql's %.3f ms, while the replay, the store's claim alone and gopotency's statement took %.3f, %.3f and %.3f ms. ",
			fl.P50Ms, sq.P50Ms, me.P50Ms, st.P50Ms, peer.P50Ms)
	}
	me8, st8, peer8 := side(f.Eight, sideReplayPrepared), side(f.Eight, sideStoreReplay), side(f.Eight, sideGopotReplay)
	if me8 != nil && st8 != nil && peer8 != nil {
		fmt.Fprintf(w, "At eight clients the replay ran %.0f requests/s, the store's claim alone %.0f and gopotency's statement %.0f: the difference between the first two is the decorator's own work at eight clients on 2 CPUs shared with the server (the fingerprint, the log and metric lines written to /dev/null, the answer), which gopotency's stand-in does not run. ",
			me8.Throughput, st8.Throughput, peer8.Throughput)
	}
	for _, pr := range f.Profiles {
		if pr.Side != sideReplayPrepared {
			continue
		}
		for _, part := range pr.Client {
			if part.Part == "decorator: log and metric lines" {
				fmt.Fprintf(w, "Of the replay's %.1f µs of client CPU at eight clients, writing its JSON log line and its metric line took %.1f µs, more than gopotency's statement adds over its floor: the specification asks for the log line on every protected request, and Lambda ships both lines. ", pr.ClientUs, part.Us)
			}
		}
	}
	w.WriteString("The stand-in runs no Go code around its statement; `make bench-peers` runs the library itself beside ichido's replay ([performance-peers.md](performance-peers.md)). ")
	w.WriteString("\n")
}
