package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// HotPathResult is what the server spends on the decorator's two paths, in
// every pgx query mode, the 8-client replay throughput against its floor,
// and the same paths through a network delay.
type HotPathResult struct {
	// Modes: one entry per pgx query exec mode, "exec" (the deployed
	// default) first.
	Modes []ModeResult `json:"modes"`
	// Redis is the server time of the Redis store's paths.
	Redis *RedisServerTime `json:"redis,omitempty"`
	// Throughput8 compares "floor (SELECT 1)" and "replay" at 8 clients.
	Throughput8 []Side `json:"throughput8,omitempty"`
	// Throughput8Redis is the same with "floor (PING)".
	Throughput8Redis []Side `json:"throughput8_redis,omitempty"`
}

// ModeResult is one pgx query exec mode: the client's latency of the floor,
// a replay and a first request, side by side, and the server's time per
// replay and per first request.
type ModeResult struct {
	Mode string `json:"mode"`
	// ProxySafe says whether the mode works through a transaction-pooling
	// proxy that does not track protocol-level prepared statements.
	ProxySafe bool          `json:"proxy_safe"`
	Sides     []Side        `json:"sides"`
	Replay    *PGServerTime `json:"replay,omitempty"`
	First     *PGServerTime `json:"first,omitempty"`
	// Floor is the server time of SELECT 1 in the same mode.
	Floor *PGServerTime `json:"floor,omitempty"`
	// NoopShape is the server time of a PL/pgSQL function with the claim's
	// arguments that does nothing (bench_noop_claim), called the same way:
	// the floor under a claim that is one function call.
	NoopShape *PGServerTime `json:"noop_shape,omitempty"`
	// PlainRead is the replay's primary-key read sent as a statement of its
	// own, planned on every call as a proxy-safe mode must: what the claim
	// would cost as plain SQL instead of a function.
	PlainRead *PGServerTime `json:"plain_read,omitempty"`
	// Unguarded is the replay through a copy of the claim function without
	// its SET enable_seqscan = off: what the guard costs.
	Unguarded *PGServerTime `json:"unguarded,omitempty"`
}

// PGServerTime is pg_stat_statements' planning and execution time over a
// number of operations, per operation.
type PGServerTime struct {
	Ops     int     `json:"ops"`
	PlanUs  float64 `json:"plan_us"`
	ExecUs  float64 `json:"exec_us"`
	TotalUs float64 `json:"total_us"`
	// MinUs is the same sum with each statement's fastest call (minimum
	// planning + minimum execution): what a call costs when the machine
	// leaves the server alone, a floor under the noise.
	MinUs      float64          `json:"min_us"`
	Statements []StatementStats `json:"statements"`
}

// StatementStats is one statement's share, per operation.
type StatementStats struct {
	Query         string  `json:"query"`
	CallsPerOp    float64 `json:"calls_per_op"`
	PlanUsPerCall float64 `json:"plan_us_per_call"`
	ExecUsPerCall float64 `json:"exec_us_per_call"`
	MinPlanUs     float64 `json:"min_plan_us"`
	MinExecUs     float64 `json:"min_exec_us"`
}

// RedisServerTime is INFO commandstats over a number of operations.
type RedisServerTime struct {
	Replay *RedisOpTime `json:"replay"`
	First  *RedisOpTime `json:"first"`
}

// RedisOpTime is the server's work per operation: the commands it ran (a
// script's inner commands listed beside the script) and the server
// microseconds of the top-level commands (a script's time includes its
// inner commands').
type RedisOpTime struct {
	Ops      int                `json:"ops"`
	ServerUs float64            `json:"server_us"`
	Commands map[string]float64 `json:"commands_per_op"`
	Usec     map[string]float64 `json:"usec_per_op"`
}

// queryModes are the modes measured, the deployed default first.
var queryModes = []struct {
	name      string
	mode      pgx.QueryExecMode
	proxySafe bool
}{
	{"exec", pgx.QueryExecModeExec, true},
	{"simple protocol", pgx.QueryExecModeSimpleProtocol, true},
	{"cache describe", pgx.QueryExecModeCacheDescribe, true},
	{"cache statement (prepared)", pgx.QueryExecModeCacheStatement, false},
}

// modePool is a pool on the bench's schema in the given query mode, with
// the settings of package dbpool that matter here.
func (d *database) modePool(ctx context.Context, u string, mode pgx.QueryExecMode, maxConns int32) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = maxConns
	cfg.ConnConfig.DefaultQueryExecMode = mode
	return pgxpool.NewWithConfig(ctx, cfg)
}

func (b *bench) hotPath(ctx context.Context) error {
	cfg := b.cfg
	res := &HotPathResult{}
	b.res.HotPath = res
	p := plan{reps: cfg.reps, clients: 1, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}
	n := 3000
	if cfg.quick {
		n = 300
	}

	admin, err := pgxpool.New(ctx, b.db.baseURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	stats := true
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		stats = false
		b.res.Notes = append(b.res.Notes, "pg_stat_statements is not available, so server times were not measured: "+err.Error())
	}

	for _, m := range queryModes {
		pool, err := b.db.modePool(ctx, b.db.url, m.mode, 4)
		if err != nil {
			return err
		}
		store := mustStore(pgstore.New(pool, nil))
		selectOne := func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error {
				var n int
				return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}
		dec, err := b.decoratorSides(ctx, store)
		if err != nil {
			pool.Close()
			return fmt.Errorf("%s: %w", m.name, err)
		}
		mr := ModeResult{Mode: m.name, ProxySafe: m.proxySafe}
		if mr.Sides, err = compare(ctx, p, append([]sideSpec{{"floor (SELECT 1)", selectOne}}, dec...)); err != nil {
			pool.Close()
			return err
		}
		logSides("postgres "+m.name, mr.Sides)
		if stats {
			if mr.Floor, err = pgServerTime(ctx, admin, n, selectOne); err != nil {
				pool.Close()
				return fmt.Errorf("%s SELECT 1: server time: %w", m.name, err)
			}
			if _, err := pool.Exec(ctx, noopShapeFunction); err != nil {
				pool.Close()
				return fmt.Errorf("creating the no-op function: %w", err)
			}
			if mr.NoopShape, err = pgServerTime(ctx, admin, n, noopShapeSide(pool).op); err != nil {
				pool.Close()
				return fmt.Errorf("%s no-op call: server time: %w", m.name, err)
			}
			if m.mode == pgx.QueryExecModeExec {
				if err := b.replayVariants(ctx, admin, pool, store, n, &mr); err != nil {
					pool.Close()
					return fmt.Errorf("%s: %w", m.name, err)
				}
			}
			for _, s := range dec {
				st, err := pgServerTime(ctx, admin, n, s.op)
				if err != nil {
					pool.Close()
					return fmt.Errorf("%s %s: server time: %w", m.name, s.name, err)
				}
				log.Printf("  postgres %s %s: server %.1f µs (plan %.1f, exec %.1f; fastest calls %.1f)", m.name, s.name, st.TotalUs, st.PlanUs, st.ExecUs, st.MinUs)
				if s.name == "replay" {
					mr.Replay = st
				} else {
					mr.First = st
				}
			}
		}
		pool.Close()
		res.Modes = append(res.Modes, mr)
	}

	// Eight clients: the throughput of replays against that of SELECT 1.
	pool, err := b.db.newPool(ctx, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	p8 := plan{reps: cfg.reps, clients: 8, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}
	selectOne := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			var n int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
	}
	dec, err := b.decoratorSides(ctx, mustStore(pgstore.New(pool, nil)))
	if err != nil {
		return err
	}
	if res.Throughput8, err = compare(ctx, p8, []sideSpec{{"floor (SELECT 1)", selectOne}, dec[0]}); err != nil {
		return err
	}
	logSides("postgres 8 clients", res.Throughput8)

	if b.redis == nil {
		return nil
	}
	rstore := mustStore(redisstore.New(b.redis, nil))
	if dec, err = b.decoratorSides(ctx, rstore); err != nil {
		return err
	}
	rt := &RedisServerTime{}
	for _, s := range dec {
		st, err := redisServerTime(ctx, b.redis, n, s.op)
		if err != nil {
			return fmt.Errorf("redis %s: server time: %w", s.name, err)
		}
		log.Printf("  redis %s: server %.1f µs, commands %v", s.name, st.ServerUs, st.Commands)
		if s.name == "replay" {
			rt.Replay = st
		} else {
			rt.First = st
		}
	}
	res.Redis = rt
	ping := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error { return b.redis.Ping(ctx).Err() })
	}
	if res.Throughput8Redis, err = compare(ctx, p8, []sideSpec{{"floor (PING)", ping}, dec[0]}); err != nil {
		return err
	}
	logSides("redis 8 clients", res.Throughput8Redis)
	return nil
}

// replayVariants measures the server time of a replay's read sent as a
// plain statement, and of the claim function without its seq-scan guard,
// on one completed key.
func (b *bench) replayVariants(ctx context.Context, admin, pool *pgxpool.Pool, store *pgstore.Store, n int, mr *ModeResult) error {
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
	if err := claimNew(ctx, store, ref); err != nil {
		return err
	}
	now := time.Now()
	if err := store.Complete(ctx, idemstore.Completion{Ref: ref, Response: storedResponse, Now: now, ExpiresAt: now.Add(idempotency.DefaultTTL)}); err != nil {
		return err
	}
	plain := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			var body string
			return pool.QueryRow(ctx, `SELECT k.response_body::text FROM idempotency_keys k WHERE k.user_id = $1::uuid AND k.key = $2::text`, ref.UserID, ref.Key).Scan(&body)
		})
	}
	var err error
	if mr.PlainRead, err = pgServerTime(ctx, admin, n, plain); err != nil {
		return fmt.Errorf("plain read: %w", err)
	}
	var def string
	if err := pool.QueryRow(ctx, `SELECT pg_get_functiondef('idempotency_key_claim'::regproc)`).Scan(&def); err != nil {
		return err
	}
	renamed := strings.Replace(def, "idempotency_key_claim(", "bench_unguarded_claim(", 1)
	unguarded := strings.Replace(renamed, " SET enable_seqscan TO 'off'\n", "", 1)
	if unguarded == renamed {
		return errors.New("the claim function has no SET enable_seqscan clause to take out")
	}
	if _, err := pool.Exec(ctx, unguarded); err != nil {
		return fmt.Errorf("creating the unguarded copy of the claim: %w", err)
	}
	if mr.Unguarded, err = pgServerTime(ctx, admin, n, replayCall(pool, "bench_unguarded_claim", ref)); err != nil {
		return fmt.Errorf("unguarded claim: %w", err)
	}
	log.Printf("  postgres %s: plain read %.1f µs, unguarded claim %.1f µs, no-op call %.1f µs", mr.Mode, mr.PlainRead.TotalUs, mr.Unguarded.TotalUs, mr.NoopShape.TotalUs)
	return nil
}

// replayCall calls the claim function fn (the key store's, or a copy) for
// ref, a completed key, as another owner: a replay's claim, which must
// answer the stored response.
func replayCall(pool *pgxpool.Pool, fn string, ref idemstore.Ref) op {
	return func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			now := time.Now()
			var answer string
			err := pool.QueryRow(ctx, `SELECT `+fn+`($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::timestamptz)`,
				ref.UserID, ref.Key, requestHash, "other", now, now.Add(time.Minute), now.Add(idempotency.DefaultTTL)).Scan(&answer)
			if err == nil && !strings.HasPrefix(answer, "{") {
				err = fmt.Errorf("%s answered %.20q, not the stored response", fn, answer)
			}
			return err
		})
	}
}

// pgServerTime runs f n times, one at a time, and returns what
// pg_stat_statements recorded for the bench's database meanwhile, per
// operation. Nothing else runs against the database during a section.
func pgServerTime(ctx context.Context, admin *pgxpool.Pool, n int, f op) (*PGServerTime, error) {
	if _, err := admin.Exec(ctx, "SELECT pg_stat_statements_reset()"); err != nil {
		return nil, err
	}
	for i := range n {
		if _, err := f(ctx, 0); err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
	}
	rows, err := admin.Query(ctx, `SELECT regexp_replace(query, '\s+', ' ', 'g'), calls, total_plan_time, total_exec_time, min_plan_time, min_exec_time
		FROM pg_stat_statements
		WHERE toplevel AND dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND query NOT LIKE '%pg_stat_statements%' AND query NOT LIKE '-- ping%' AND query <> ''`)
	if err != nil {
		return nil, err
	}
	st := &PGServerTime{Ops: n}
	for rows.Next() {
		var q string
		var calls int64
		var plan, exec, minPlan, minExec float64
		if err := rows.Scan(&q, &calls, &plan, &exec, &minPlan, &minExec); err != nil {
			return nil, err
		}
		if calls == 0 {
			continue
		}
		if len(q) > 120 {
			q = q[:117] + "…"
		}
		st.PlanUs += plan * 1000 / float64(n)
		st.ExecUs += exec * 1000 / float64(n)
		st.Statements = append(st.Statements, StatementStats{
			Query: q, CallsPerOp: float64(calls) / float64(n),
			PlanUsPerCall: plan * 1000 / float64(calls), ExecUsPerCall: exec * 1000 / float64(calls),
			MinPlanUs: minPlan * 1000, MinExecUs: minExec * 1000,
		})
		st.MinUs += float64(calls) / float64(n) * (minPlan + minExec) * 1000
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sort.Slice(st.Statements, func(i, j int) bool { return st.Statements[i].CallsPerOp > st.Statements[j].CallsPerOp })
	st.TotalUs = st.PlanUs + st.ExecUs
	return st, nil
}

// redisServerTime runs f n times and returns INFO commandstats per
// operation.
func redisServerTime(ctx context.Context, c *redis.Client, n int, f op) (*RedisOpTime, error) {
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		return nil, err
	}
	for i := range n {
		if _, err := f(ctx, 0); err != nil {
			return nil, fmt.Errorf("operation %d: %w", i, err)
		}
	}
	stats, err := redistest.CommandStats(ctx, c)
	if err != nil {
		return nil, err
	}
	st := &RedisOpTime{Ops: n, Commands: map[string]float64{}, Usec: map[string]float64{}}
	for name, cs := range stats {
		st.Commands[name] = cs.Calls / float64(n)
		st.Usec[name] = cs.Usec / float64(n)
	}
	st.ServerUs = redistest.ServerUsec(stats) / float64(n)
	return st, nil
}

// DelayResult is the decorator's paths through a TCP proxy that adds a
// fixed delay each way, as a network between the function and the
// database would.
type DelayResult struct {
	DelayMs  float64 `json:"delay_ms_each_way"`
	Postgres []Side  `json:"postgres"`
	Redis    []Side  `json:"redis,omitempty"`
}

// delayEachWay is the delay the proxy adds in each direction.
const delayEachWay = 500 * time.Microsecond

func (b *bench) delayed(ctx context.Context) error {
	cfg := b.cfg
	res := &DelayResult{DelayMs: ms(delayEachWay)}
	b.res.Delay = res
	reps := cfg.reps
	if reps > 3 {
		reps = 3
	}
	p := plan{reps: reps, clients: 1, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}

	u, err := url.Parse(b.db.url)
	if err != nil {
		return err
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	pgProxy, err := startDelayProxy(host, delayEachWay)
	if err != nil {
		return err
	}
	defer pgProxy.Close()
	u.Host = pgProxy.Addr()
	pool, err := b.db.modePool(ctx, u.String(), pgx.QueryExecModeExec, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	selectOne := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			var n int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
	}
	dec, err := b.decoratorSides(ctx, mustStore(pgstore.New(pool, nil)))
	if err != nil {
		return err
	}
	if res.Postgres, err = compare(ctx, p, append([]sideSpec{{"floor (SELECT 1)", selectOne}}, dec...)); err != nil {
		return err
	}
	logSides("postgres delayed", res.Postgres)

	if b.redis == nil {
		return nil
	}
	rProxy, err := startDelayProxy(b.redis.Options().Addr, delayEachWay)
	if err != nil {
		return err
	}
	defer rProxy.Close()
	client := redis.NewClient(&redis.Options{Addr: rProxy.Addr(), PoolSize: 8})
	defer client.Close()
	ping := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error { return client.Ping(ctx).Err() })
	}
	if dec, err = b.decoratorSides(ctx, mustStore(redisstore.New(client, nil))); err != nil {
		return err
	}
	if res.Redis, err = compare(ctx, p, append([]sideSpec{{"floor (PING)", ping}}, dec...)); err != nil {
		return err
	}
	logSides("redis delayed", res.Redis)
	return nil
}

// FingerprintResult is idempotency.Fingerprint's cost per call for JSON
// bodies of several sizes.
type FingerprintResult struct {
	Sizes []FingerprintSize `json:"sizes"`
}

// FingerprintSize is one body size.
type FingerprintSize struct {
	Label       string  `json:"label"`
	BodyBytes   int     `json:"body_bytes"`
	AllocsPerOp int64   `json:"allocs_per_op"`
	BytesPerOp  int64   `json:"bytes_per_op"`
	NsPerOp     int64   `json:"ns_per_op"`
	BytesOverIn float64 `json:"bytes_per_body_byte"`
}
