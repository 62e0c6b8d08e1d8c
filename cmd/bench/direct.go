package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net/url"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/ichido/ichido/internal/testkit/peers"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// DirectResult is section 1f: the PostgreSQL replay and first request on a
// direct connection in both query modes, beside the statements two peer
// libraries send for the same paths, at one and eight clients, the same
// through pgbouncer, and where a replay's time goes on both sides.
type DirectResult struct {
	// One and Eight are the direct connection at one and eight clients;
	// OneAwake and EightAwake the same with the cores kept awake (awake.go).
	One        []Side `json:"one"`
	Eight      []Side `json:"eight"`
	OneAwake   []Side `json:"one_awake,omitempty"`
	EightAwake []Side `json:"eight_awake,omitempty"`
	// Bouncer and Bouncer8 go through pgbouncer in transaction mode, where
	// only the proxy-safe mode works.
	Bouncer        []Side `json:"bouncer,omitempty"`
	Bouncer8       []Side `json:"bouncer8,omitempty"`
	BouncerVersion string `json:"bouncer_version,omitempty"`
	BouncerError   string `json:"bouncer_error,omitempty"`
	// Server is the server time per operation of each replay side, from
	// pg_stat_statements, by side name.
	Server map[string]*PGServerTime `json:"server,omitempty"`
	// Profile is where the CPU of the eight-client replay in the prepared
	// mode goes.
	Profile *ReplayProfile `json:"profile,omitempty"`
	// Redis and RedisAwake are the Redis 7.0 store's replay and first
	// request beside idemlease's commands for them, one client.
	Redis      []Side `json:"redis,omitempty"`
	RedisAwake []Side `json:"redis_awake,omitempty"`
}

// The sides of section 1f.
const (
	sideFloor          = "floor (SELECT 1)"
	sideReplayExec     = "ichido replay, exec mode"
	sideReplayPrepared = "ichido replay, prepared mode"
	sideFirstExec      = "ichido first request, exec mode"
	sideFirstPrepared  = "ichido first request, prepared mode"
	sideGopotReplay    = "gopotency's replay statements"
	sideGopotFirst     = "gopotency's first-request statements"
	sideLeaseReplay    = "idemlease's replay statements"
	sideLeaseFirst     = "idemlease's first-request statements"

	// The store's calls alone, without the decorator: what the peers'
	// statements and commands compare with.
	sideStoreReplay = "ichido store: claim of a completed key"
	sideStoreFirst  = "ichido store: claim and completion"

	sidePing             = "floor (PING)"
	sideRedisReplay      = "ichido replay"
	sideRedisFirst       = "ichido first request"
	sideLeaseRedisReplay = "idemlease's replay commands"
	sideLeaseRedisFirst  = "idemlease's first-request commands"
)

// peerStatements are the statements two peer libraries send to PostgreSQL,
// as their sources (gopotency v1.0.0 storage/sql, idemlease v1.1.0
// pgstore) write them, on tables of the schemas their documentation gives.
// The libraries themselves are not in this module: the Go module proxy
// does not serve them. The statements run through database/sql and pgx's
// driver for it, as those libraries' users run them; what the libraries do
// around them in Go (gopotency decodes a JSON record, idemlease a record's
// fields) is not counted, so each peer side is a lower bound of that
// library's time on the same path.
type peerStatements struct {
	db     *sql.DB
	gopot  string // table
	lease  string // table
	gopKey string // a completed key of each
	lsKey  []byte
}

func (d *database) peerTables(ctx context.Context) error {
	_, err := d.pool.Exec(ctx, `
CREATE TABLE IF NOT EXISTS bench_gopotency_records (
    key VARCHAR(255) PRIMARY KEY,
    data BYTEA NOT NULL,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL);
CREATE INDEX IF NOT EXISTS bench_gopotency_expires ON bench_gopotency_records (expires_at);
CREATE TABLE IF NOT EXISTS bench_gopotency_records_locks (
    key VARCHAR(255) PRIMARY KEY,
    expires_at TIMESTAMP WITH TIME ZONE NOT NULL);
CREATE TABLE IF NOT EXISTS bench_idemlease_records (
    key               bytea       PRIMARY KEY,
    state             smallint    NOT NULL,
    token             text        NOT NULL,
    fingerprint       bytea       NOT NULL DEFAULT ''::bytea,
    payload           bytea,
    lease_expires_at  timestamptz NOT NULL,
    record_expires_at timestamptz,
    created_at        timestamptz NOT NULL DEFAULT now())`)
	return err
}

// gopotencyRecord is the JSON a gopotency record is kept as: the request's
// key, hash and status and the response, its body as bytes.
func gopotencyRecord(key string) ([]byte, error) {
	now := time.Now()
	return json.Marshal(map[string]any{
		"key": key, "request_hash": requestHash, "status": "completed",
		"response": map[string]any{"status_code": storedResponse.StatusCode, "headers": map[string][]string{
			"Content-Type": {storedResponse.Headers["Content-Type"]}, "Location": {storedResponse.Headers["Location"]}}, "body": []byte(storedResponse.Body)},
		"created_at": now, "expires_at": now.Add(24 * time.Hour),
	})
}

// newPeerStatements opens a database/sql pool of maxConns connections on
// connString, for the tables in schema ("" for the search path's).
func newPeerStatements(ctx context.Context, connString string, maxConns int, schema string) (*peerStatements, error) {
	db, err := sql.Open("pgx", connString)
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	ps := &peerStatements{db: db, gopot: "bench_gopotency_records", lease: "bench_idemlease_records"}
	if schema != "" {
		ps.gopot, ps.lease = schema+"."+ps.gopot, schema+"."+ps.lease
	}
	// A completed record of each, for the replays.
	ps.gopKey = uuid.NewString()
	if err := ps.gopotencyFirst(ctx, ps.gopKey); err != nil {
		db.Close()
		return nil, fmt.Errorf("gopotency's first request: %w", err)
	}
	ps.lsKey = []byte(uuid.NewString())
	if err := ps.idemleaseFirst(ctx, ps.lsKey); err != nil {
		db.Close()
		return nil, fmt.Errorf("idemlease's first request: %w", err)
	}
	return ps, nil
}

// gopotencyReplay is gopotency's Check of a completed key: one SELECT.
func (p *peerStatements) gopotencyReplay(ctx context.Context) error {
	var data []byte
	var expires time.Time
	if err := p.db.QueryRowContext(ctx, "SELECT data, expires_at FROM "+p.gopot+" WHERE key = $1", p.gopKey).Scan(&data, &expires); err != nil {
		return err
	}
	if len(data) == 0 {
		return errors.New("gopotency's record is empty")
	}
	return nil
}

// gopotencyFirst is gopotency's Check, Lock and Store of a new key: the
// record is read (none), the lock row inserted, the pending record
// written, and after the handler the record read again, written completed,
// and the lock row deleted.
func (p *peerStatements) gopotencyFirst(ctx context.Context, key string) error {
	var data []byte
	var expires time.Time
	err := p.db.QueryRowContext(ctx, "SELECT data, expires_at FROM "+p.gopot+" WHERE key = $1", key).Scan(&data, &expires)
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("a new key was found: %v", err)
	}
	now := time.Now()
	res, err := p.db.ExecContext(ctx, "INSERT INTO "+p.gopot+"_locks (key, expires_at) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET expires_at = $2 WHERE "+
		p.gopot+"_locks.expires_at < $3", key, now.Add(30*time.Second), now)
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errors.New("the lock was not taken")
	}
	set := "INSERT INTO " + p.gopot + " (key, data, expires_at) VALUES ($1, $2, $3) ON CONFLICT (key) DO UPDATE SET data = $2, expires_at = $3"
	rec, err := gopotencyRecord(key)
	if err != nil {
		return err
	}
	if _, err := p.db.ExecContext(ctx, set, key, rec, now.Add(24*time.Hour)); err != nil {
		return err
	}
	if err := p.db.QueryRowContext(ctx, "SELECT data, expires_at FROM "+p.gopot+" WHERE key = $1", key).Scan(&data, &expires); err != nil {
		return err
	}
	if _, err := p.db.ExecContext(ctx, set, key, rec, now.Add(24*time.Hour)); err != nil {
		return err
	}
	_, err = p.db.ExecContext(ctx, "DELETE FROM "+p.gopot+"_locks WHERE key = $1", key)
	return err
}

// idemleaseReplay is idemlease's Reserve of a completed key: the claim's
// INSERT meets the live record and returns no row, and the record is read.
func (p *peerStatements) idemleaseReplay(ctx context.Context) error {
	var lease int64
	err := p.db.QueryRowContext(ctx, p.idemleaseReserve(), p.lsKey, uuid.NewString(), []byte(requestHash), int64(30000)).Scan(&lease)
	if !errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("a completed key was reserved again: %v", err)
	}
	var (
		state    int16
		token    string
		fp, pay  []byte
		leaseMs  int64
		recordMs sql.NullInt64
	)
	return p.db.QueryRowContext(ctx, "SELECT state, token, fingerprint, payload, "+leaseLeftMs+", "+recordLeftMs+" FROM "+p.lease+
		" WHERE key = $1 AND ((state = 1 AND lease_expires_at > now()) OR (state = 2 AND record_expires_at > now()))", p.lsKey).Scan(&state, &token, &fp, &pay, &leaseMs, &recordMs)
}

// The milliseconds left of a reservation's lease and of a completed
// record, which idemlease's statements return.
const (
	leaseLeftMs  = "(extract(epoch from (lease_expires_at - now())) * 1000)::bigint"
	recordLeftMs = "CASE WHEN record_expires_at IS NULL THEN NULL ELSE (extract(epoch from (record_expires_at - now())) * 1000)::bigint END"
)

// idemleaseReserve inserts a reservation (state 1) unless a live record
// is there; a record whose lease or life is over is taken over.
func (p *peerStatements) idemleaseReserve() string {
	t := p.lease
	over := "((" + t + ".state = 1 AND " + t + ".lease_expires_at <= now()) OR (" + t + ".state = 2 AND " + t + ".record_expires_at <= now()))"
	return "INSERT INTO " + t + " (key, state, token, fingerprint, lease_expires_at, record_expires_at, payload, created_at)" +
		" VALUES ($1, 1, $2, $3, now() + interval '1 millisecond' * $4::double precision, NULL, NULL, now())" +
		" ON CONFLICT (key) DO UPDATE SET state = 1, token = EXCLUDED.token, fingerprint = EXCLUDED.fingerprint," +
		" lease_expires_at = EXCLUDED.lease_expires_at, record_expires_at = NULL, payload = NULL, created_at = now()" +
		" WHERE " + over + " RETURNING " + leaseLeftMs
}

// idemleaseFirst is idemlease's Reserve of a new key and its Complete.
func (p *peerStatements) idemleaseFirst(ctx context.Context, key []byte) error {
	token := uuid.NewString()
	var lease int64
	if err := p.db.QueryRowContext(ctx, p.idemleaseReserve(), key, token, []byte(requestHash), int64(30000)).Scan(&lease); err != nil {
		return err
	}
	res, err := p.db.ExecContext(ctx, "UPDATE "+p.lease+" SET state = 2, payload = $3, record_expires_at = now() + interval '1 millisecond' * $4::double precision"+
		" WHERE key = $1 AND token = $2 AND state = 1 AND lease_expires_at > now()", key, token, []byte(storedResponse.Body), float64(24*time.Hour/time.Millisecond))
	if err != nil {
		return err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return errors.New("the completion wrote nothing")
	}
	return nil
}

func (p *peerStatements) sides() []sideSpec {
	return []sideSpec{
		{sideGopotReplay, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error { return p.gopotencyReplay(ctx) })
		}},
		{sideLeaseReplay, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error { return p.idemleaseReplay(ctx) })
		}},
	}
}

func (p *peerStatements) firstSides() []sideSpec {
	return []sideSpec{
		{sideGopotFirst, func(ctx context.Context, _ int) (time.Duration, error) {
			key := uuid.NewString()
			return timed(func() error { return p.gopotencyFirst(ctx, key) })
		}},
		{sideLeaseFirst, func(ctx context.Context, _ int) (time.Duration, error) {
			key := []byte(uuid.NewString())
			return timed(func() error { return p.idemleaseFirst(ctx, key) })
		}},
	}
}

// direct runs section 1f.
func (b *bench) direct(ctx context.Context) error {
	cfg := b.cfg
	res := &DirectResult{Server: map[string]*PGServerTime{}}
	b.res.Direct = res
	if err := b.db.peerTables(ctx); err != nil {
		return fmt.Errorf("the peers' tables: %w", err)
	}
	open := func(mode dbpool.QueryMode, conns int32, u string) (*pgxpool.Pool, error) {
		return dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: u, MaxConns: conns, QueryMode: mode})
	}

	for _, clients := range []int{1, 8} {
		conns := int32(max(clients, 2))
		execPool, err := open(dbpool.QueryModeExec, conns, b.db.url)
		if err != nil {
			return err
		}
		defer execPool.Close()
		prepPool, err := open(dbpool.QueryModePrepared, conns, b.db.url)
		if err != nil {
			return err
		}
		defer prepPool.Close()
		peers, err := newPeerStatements(ctx, b.db.url, int(conns), "")
		if err != nil {
			return fmt.Errorf("the peers' statements: %w", err)
		}
		defer peers.db.Close()
		execSides, err := b.decoratorSides(ctx, mustStore(pgstore.New(execPool, nil)))
		if err != nil {
			return err
		}
		prepSides, err := b.decoratorSides(ctx, mustStore(pgstore.New(prepPool, nil)))
		if err != nil {
			return err
		}
		floor := sideSpec{sideFloor, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error {
				var n int
				return prepPool.QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}}
		prepStore := mustStore(pgstore.New(prepPool, nil))
		storeReplay, err := primed(ctx, claimAloneSide(prepStore))
		if err != nil {
			return err
		}
		replays := []sideSpec{floor, named(execSides[0], sideReplayExec), named(prepSides[0], sideReplayPrepared), named(storeReplay, sideStoreReplay)}
		replays = append(replays, peers.sides()...)
		p := plan{reps: cfg.reps, clients: clients, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}
		specs, idle, awake := replays, &res.Eight, &res.EightAwake
		if clients == 1 {
			firsts := append([]sideSpec{named(execSides[1], sideFirstExec), named(prepSides[1], sideFirstPrepared), {sideStoreFirst, claimComplete(prepStore)}}, peers.firstSides()...)
			specs, idle, awake = append(replays, firsts...), &res.One, &res.OneAwake
		}
		if *idle, err = compare(ctx, p, specs); err != nil {
			return err
		}
		logSides(fmt.Sprintf("direct, %d clients", clients), *idle)
		stop, err := keepAwake(ctx)
		if err != nil {
			return err
		}
		*awake, err = compare(ctx, p, specs)
		if stopErr := stop(); err == nil {
			err = stopErr
		}
		if err != nil {
			return err
		}
		logSides(fmt.Sprintf("direct, %d clients, cores kept awake", clients), *awake)
		if clients == 1 {
			statements, err := claimStatementSides(ctx, prepPool)
			if err != nil {
				return err
			}
			if err := b.directServerTimes(ctx, append(slices.Clone(replays[1:]), statements...), res); err != nil {
				return err
			}
			continue
		}
		if res.Profile, err = b.profileReplay(ctx, prepPool, named(prepSides[0], sideReplayPrepared), clients); err != nil {
			log.Printf("profile: %v", err)
			b.res.Notes = append(b.res.Notes, "the replay's profile was not taken: "+err.Error())
		}
	}
	if err := b.directRedis(ctx, res); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	if err := b.directBouncer(ctx, res); err != nil {
		res.BouncerError = err.Error()
		log.Printf("pgbouncer: %v", err)
	}
	return nil
}

func named(s sideSpec, name string) sideSpec { return sideSpec{name, s.op} }

// primed runs s once, alone: claimAloneSide completes its key on its
// first call, which must come before clients run it side by side.
func primed(ctx context.Context, s sideSpec) (sideSpec, error) {
	if _, err := s.op(ctx, 0); err != nil {
		return s, fmt.Errorf("%s: %w", s.name, err)
	}
	return s, nil
}

// directServerTimes measures what the server spends per replay on each
// side, one side at a time.
func (b *bench) directServerTimes(ctx context.Context, replays []sideSpec, res *DirectResult) error {
	admin, err := pgxpool.New(ctx, b.db.baseURL)
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements"); err != nil {
		return nil // noted by section 1b
	}
	n := 3000
	if b.cfg.quick {
		n = 300
	}
	for _, s := range replays {
		st, err := pgServerTime(ctx, admin, n, s.op)
		if err != nil {
			return fmt.Errorf("%s: server time: %w", s.name, err)
		}
		log.Printf("  %s: server %.1f µs (plan %.1f, exec %.1f; fastest calls %.1f)", s.name, st.TotalUs, st.PlanUs, st.ExecUs, st.MinUs)
		res.Server[s.name] = st
	}
	return nil
}

// directBouncer runs the replays through a private pgbouncer in transaction
// pooling mode: ichido in its proxy-safe mode, the peers' statements in
// pgx's exec mode (the mode a transaction pooler without prepared-statement
// tracking needs).
func (b *bench) directBouncer(ctx context.Context, res *DirectResult) error {
	u, err := url.Parse(b.db.baseURL)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(u.Port())
	if err != nil {
		port = 5432
	}
	user := "postgres"
	if u.User != nil && u.User.Username() != "" {
		user = u.User.Username()
	}
	bouncer, err := pgtest.StartPgBouncer(ctx, pgtest.PgBouncerOptions{Host: u.Hostname(), Port: port, Users: []string{user}})
	if err != nil {
		return err
	}
	defer func() { _ = bouncer.Stop() }()
	res.BouncerVersion = pgbouncerVersion(ctx)
	via, err := url.Parse(b.db.url)
	if err != nil {
		return err
	}
	via.Host = fmt.Sprintf("127.0.0.1:%d", bouncer.Port)
	q := via.Query()
	// pgbouncer refuses startup parameters it does not know: the
	// statements name their tables in the bench's schema instead.
	q.Del("search_path")
	q.Del("options")
	via.RawQuery = q.Encode()
	schema := b.db.schema

	for _, clients := range []int{1, 8} {
		conns := int32(max(clients, 2))
		pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: via.String(), MaxConns: conns})
		if err != nil {
			return err
		}
		defer pool.Close()
		sides, err := b.decoratorSides(ctx, mustStore(pgstore.New(pool, &pgstore.Options{Schema: schema})))
		if err != nil {
			return err
		}
		pq := via.Query()
		pq.Set("default_query_exec_mode", "exec")
		peerURL := *via
		peerURL.RawQuery = pq.Encode()
		peers, err := newPeerStatements(ctx, peerURL.String(), int(conns), schema)
		if err != nil {
			return fmt.Errorf("the peers' statements through pgbouncer: %w", err)
		}
		defer peers.db.Close()
		floor := sideSpec{sideFloor, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error {
				var n int
				return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
			})
		}}
		storeReplay, err := primed(ctx, claimAloneSide(mustStore(pgstore.New(pool, &pgstore.Options{Schema: schema}))))
		if err != nil {
			return err
		}
		specs := append([]sideSpec{floor, named(sides[0], sideReplayExec), named(storeReplay, sideStoreReplay)}, peers.sides()...)
		p := plan{reps: b.cfg.reps, clients: clients, dur: b.cfg.floorDur, maxOps: b.cfg.maxOps, warm: b.cfg.warm}
		got, err := compare(ctx, p, specs)
		if err != nil {
			return err
		}
		logSides(fmt.Sprintf("pgbouncer, %d clients", clients), got)
		if clients == 1 {
			res.Bouncer = got
		} else {
			res.Bouncer8 = got
		}
	}
	return nil
}

func pgbouncerVersion(ctx context.Context) string {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
	}
	out, err := exec.CommandContext(ctx, bin, "--version").Output()
	if err != nil {
		return "pgbouncer"
	}
	first, _, _ := strings.Cut(string(out), "\n")
	return strings.TrimSpace(first)
}

// The claim of a completed key on a direct connection, as a statement on
// its own, in its two forms: the claim function called through a prepared
// statement, and the store's claim (a prepared plain read, the function
// only on a miss).
const (
	sideClaimFunction = "claim statement: the function, prepared"
	sideClaimRead     = "claim statement: the read, then the function on a miss (pgstore), prepared"
)

func claimStatementSides(ctx context.Context, pool *pgxpool.Pool) ([]sideSpec, error) {
	store := mustStore(pgstore.New(pool, nil))
	alone := claimAloneSide(store)
	if _, err := alone.op(ctx, 0); err != nil {
		return nil, err
	}
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
	if err := claimNew(ctx, store, ref); err != nil {
		return nil, err
	}
	now := time.Now()
	if err := store.Complete(ctx, idemstore.Completion{Ref: ref, Response: storedResponse, Now: now, ExpiresAt: now.Add(idempotency.DefaultTTL)}); err != nil {
		return nil, err
	}
	return []sideSpec{{sideClaimFunction, replayCall(pool, "idempotency_key_claim", ref)}, named(alone, sideClaimRead)}, nil
}

// directRedis compares the Redis store (on Redis 7.0, whose completion is
// a script) with the commands idemlease sends for the same paths (package
// peers: its two scripts on a hash per record), at one client, in both
// machine states.
func (b *bench) directRedis(ctx context.Context, res *DirectResult) error {
	if b.redis == nil {
		return nil
	}
	rstore := mustStore(redisstore.New(b.redis, nil))
	dec, err := b.decoratorSides(ctx, rstore)
	if err != nil {
		return err
	}
	storeReplay, err := primed(ctx, claimAloneSide(rstore))
	if err != nil {
		return err
	}
	lease := peers.RedisLease{C: b.redis}
	payload := peers.Payload(storedResponse.StatusCode, storedResponse.Headers, storedResponse.Body)
	fingerprint := []byte(requestHash[:32])
	token := func() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }
	scope := "idemlease:" + uuid.NewString() + ":"
	done := scope + uuid.NewString()
	first := func(ctx context.Context, key string) error {
		t := token()
		if ok, err := lease.Reserve(ctx, key, t, fingerprint, 30*time.Second); err != nil || !ok {
			return fmt.Errorf("reserving a new key: %v %v", ok, err)
		}
		return lease.Complete(ctx, key, t, payload, 24*time.Hour)
	}
	if err := first(ctx, done); err != nil {
		return err
	}
	specs := []sideSpec{
		{sidePing, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error { return b.redis.Ping(ctx).Err() })
		}},
		named(dec[0], sideRedisReplay),
		named(storeReplay, sideStoreReplay),
		{sideLeaseRedisReplay, func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error {
				ok, err := lease.Reserve(ctx, done, token(), fingerprint, 30*time.Second)
				if err == nil && ok {
					err = errors.New("a completed key was reserved again")
				}
				return err
			})
		}},
		named(dec[1], sideRedisFirst),
		{sideStoreFirst, claimComplete(rstore)},
		{sideLeaseRedisFirst, func(ctx context.Context, _ int) (time.Duration, error) {
			key := scope + uuid.NewString()
			return timed(func() error { return first(ctx, key) })
		}},
	}
	p := plan{reps: b.cfg.reps, clients: 1, dur: b.cfg.floorDur, maxOps: b.cfg.maxOps, warm: b.cfg.warm}
	if res.Redis, err = compare(ctx, p, specs); err != nil {
		return err
	}
	logSides("redis 7.0 with idemlease's commands", res.Redis)
	stop, err := keepAwake(ctx)
	if err != nil {
		return err
	}
	res.RedisAwake, err = compare(ctx, p, specs)
	if stopErr := stop(); err == nil {
		err = stopErr
	}
	if err != nil {
		return err
	}
	logSides("redis 7.0 with idemlease's commands, cores kept awake", res.RedisAwake)
	return nil
}
