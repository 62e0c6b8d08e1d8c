package main

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net"
	"net/url"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// BeyondResult is what the options past the round-trip floor measure: a
// replay answered from the local cache against the floors, the memory of a
// cached record, and the store load of a duplicate that waits for the first
// request's answer.
type BeyondResult struct {
	// Postgres: "floor (SELECT 1)", "replay", "replay (local cache)".
	Postgres []Side `json:"postgres"`
	// Redis: "floor (PING)", "replay", "replay (local cache)", "first request".
	Redis []Side `json:"redis,omitempty"`
	// Valkey: the same sides on Valkey 8.1, where the store completes a
	// record with SET … IFEQ instead of the script Redis 7.0 needs.
	Valkey []Side `json:"valkey,omitempty"`
	// PostgresAwake, RedisAwake and ValkeyAwake: the same comparisons with
	// the machine's cores kept awake by a busy loop at the lowest priority
	// (awake.go), where a loopback round trip is at its fastest.
	PostgresAwake []Side `json:"postgres_awake,omitempty"`
	RedisAwake    []Side `json:"redis_awake,omitempty"`
	ValkeyAwake   []Side `json:"valkey_awake,omitempty"`
	// CacheRecords is how many records filled the cache to measure its
	// memory; CacheBytesPerRecord the heap they took, per record, and
	// CacheCountedPerRecord what the cache's bound counts for each.
	CacheRecords          int     `json:"cache_records"`
	CacheBytesPerRecord   float64 `json:"cache_bytes_per_record"`
	CacheCountedPerRecord float64 `json:"cache_counted_per_record"`
	// Waits: one waiting duplicate per first request that runs for
	// HandlerMs, on PostgreSQL.
	Waits []WaitLoad `json:"waits"`
	// Create is the sample create through the delay proxy, its key
	// completed after the insert and in the insert's batch.
	Create *CreateTrips `json:"create,omitempty"`
}

// WaitLoad is the store load of one duplicate that waited for a first
// request running HandlerMs: its Claim calls (the first one and the polls)
// and the time it waited.
type WaitLoad struct {
	HandlerMs    float64 `json:"handler_ms"`
	Claims       int     `json:"claims"`
	WaitedMs     float64 `json:"waited_ms"`
	ClaimsPerSec float64 `json:"claims_per_s"`
	Replayed     bool    `json:"replayed"`
}

// cachedWrap protects h with store and a local cache.
func (b *bench) cachedWrap(h handler, store idemstore.Store) (handler, error) {
	return idempotency.Wrap(h, idempotency.Config{
		Store: store,
		Settings: idempotency.Settings{
			LocalCache: &idempotency.LocalCache{},
			Logger:     slog.New(slog.NewJSONHandler(b.devnull, nil)),
			Metrics:    b.devnull,
		},
	})
}

// cachedReplaySide is a replay of one key that the wrapper completed, so
// that every call after the first is answered from its cache.
func (b *bench) cachedReplaySide(ctx context.Context, store idemstore.Store) (sideSpec, error) {
	h, err := b.cachedWrap(noop, store)
	if err != nil {
		return sideSpec{}, err
	}
	ev := postEvent("/noop", uuid.NewString(), uuid.NewString(), taskBody)
	if _, err := call(ctx, h, ev, false); err != nil {
		return sideSpec{}, fmt.Errorf("first request of the cached key: %w", err)
	}
	return sideSpec{"replay (local cache)", func(ctx context.Context, _ int) (time.Duration, error) {
		return call(ctx, h, ev, true)
	}}, nil
}

func (b *bench) beyond(ctx context.Context) error {
	cfg := b.cfg
	p := plan{reps: cfg.reps, clients: 1, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}
	res := &BeyondResult{}
	b.res.Beyond = res
	// A Lambda invocation has a deadline; so do these calls (one far away),
	// so that the lease is the deadline's, as deployed, and no heartbeat runs.
	ctx, cancel := context.WithTimeout(ctx, 24*time.Hour)
	defer cancel()

	pool, err := b.db.newPool(ctx, 4)
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
	store := mustStore(pgstore.New(pool, nil))
	dec, err := b.decoratorSides(ctx, store)
	if err != nil {
		return err
	}
	cached, err := b.cachedReplaySide(ctx, store)
	if err != nil {
		return err
	}
	// Each comparison runs twice: as the machine is, then with its cores
	// kept awake (awake.go).
	type comparison struct {
		name        string
		specs       []sideSpec
		idle, awake *[]Side
	}
	comparisons := []comparison{{"postgres", []sideSpec{{"floor (SELECT 1)", selectOne}, dec[0], cached}, &res.Postgres, &res.PostgresAwake}}
	for _, server := range []struct {
		name        string
		client      *redis.Client
		idle, awake *[]Side
	}{{"redis", b.redis, &res.Redis, &res.RedisAwake}, {"valkey", b.valkey, &res.Valkey, &res.ValkeyAwake}} {
		if server.client == nil {
			continue
		}
		ping := func(ctx context.Context, _ int) (time.Duration, error) {
			return timed(func() error { return server.client.Ping(ctx).Err() })
		}
		rstore := mustStore(redisstore.New(server.client, nil))
		dec, err := b.decoratorSides(ctx, rstore)
		if err != nil {
			return err
		}
		cached, err := b.cachedReplaySide(ctx, rstore)
		if err != nil {
			return err
		}
		comparisons = append(comparisons, comparison{server.name, []sideSpec{{"floor (PING)", ping}, dec[0], cached, dec[1]}, server.idle, server.awake})
	}
	for _, c := range comparisons {
		if *c.idle, err = compareInTurn(ctx, p, c.specs); err != nil {
			return err
		}
		logSides(c.name, *c.idle)
	}
	stopAwake, err := keepAwake(ctx)
	if err != nil {
		return err
	}
	for _, c := range comparisons {
		if *c.awake, err = compareInTurn(ctx, p, c.specs); err != nil {
			_ = stopAwake()
			return err
		}
		logSides(c.name+", cores kept awake", *c.awake)
	}
	if err := stopAwake(); err != nil {
		return err
	}

	if err := b.cacheMemory(ctx, res); err != nil {
		return err
	}
	log.Printf("  local cache: %.0f bytes of heap per cached record (%.0f counted), %d records", res.CacheBytesPerRecord, res.CacheCountedPerRecord, res.CacheRecords)

	reps := min(cfg.reps, 3)
	if res.Create, err = b.createTrips(ctx, plan{reps: reps, clients: 1, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}); err != nil {
		return err
	}
	for name, n := range res.Create.RoundTrips {
		log.Printf("  %s: %.2f round trips per create", name, n)
	}

	for _, d := range []time.Duration{100 * time.Millisecond, time.Second, 5 * time.Second} {
		w, err := b.waitLoad(ctx, store, d)
		if err != nil {
			return err
		}
		res.Waits = append(res.Waits, w)
		log.Printf("  waiting duplicate, first request of %v: %d claims in %.0f ms (%.1f/s), replayed %t", d, w.Claims, w.WaitedMs, w.ClaimsPerSec, w.Replayed)
	}
	return nil
}

// nullStore claims every key and completes every claim: the cache's memory
// is measured without a server's.
type nullStore struct{}

func (nullStore) Claim(_ context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{Claimed: true, Record: idemstore.Record{UserID: c.UserID, Key: c.Key, Owner: c.Owner, Status: idemstore.StatusInProgress}}, nil
}
func (nullStore) Complete(context.Context, idemstore.Completion) error { return nil }
func (nullStore) Release(context.Context, idemstore.Ref) error         { return nil }
func (nullStore) Renew(context.Context, idemstore.Renewal) error       { return nil }

// cacheMemory fills a cache with completed records of the bench's task
// answer (one per key) and measures the heap they hold.
func (b *bench) cacheMemory(ctx context.Context, res *BeyondResult) error {
	n := 20_000
	if b.cfg.quick {
		n = 2_000
	}
	h, err := idempotency.Wrap(noop, idempotency.Config{
		Store: nullStore{},
		Settings: idempotency.Settings{
			LocalCache: &idempotency.LocalCache{MaxEntries: n, MaxBytes: 1 << 30},
			Logger:     slog.New(slog.NewJSONHandler(b.devnull, nil)),
			Metrics:    b.devnull,
		},
	})
	if err != nil {
		return err
	}
	user := uuid.NewString()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = uuid.NewString()
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	for _, key := range keys {
		if _, err := call(ctx, h, postEvent("/noop", user, key, taskBody), false); err != nil {
			return err
		}
	}
	after := heap()
	runtime.KeepAlive(h)
	res.CacheRecords = n
	res.CacheBytesPerRecord = float64(int64(after)-int64(before)) / float64(n)
	resp, _ := noop(ctx, postEvent("/noop", user, keys[0], taskBody))
	counted := idempotencyCacheOverhead + len(user) + len(keys[0]) + 64 + len(resp.Body)
	for k, v := range resp.Headers {
		counted += len(k) + len(v)
	}
	res.CacheCountedPerRecord = float64(counted)
	return nil
}

// idempotencyCacheOverhead is the fixed cost per entry that the cache's
// byte bound counts (the package's cacheEntryOverhead), to set beside the
// measured heap.
const idempotencyCacheOverhead = 640

// countingClaims counts the Claim calls that reach a Store.
type countingClaims struct {
	idemstore.Store
	claims atomic.Int32
}

func (s *countingClaims) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	s.claims.Add(1)
	return s.Store.Claim(ctx, c)
}

// waitLoad runs a first request whose handler takes d and, once it runs, a
// duplicate that waits for its answer (WaitForResult 10s), and counts the
// duplicate's Claim calls.
func (b *bench) waitLoad(ctx context.Context, store idemstore.Store, d time.Duration) (WaitLoad, error) {
	started := make(chan struct{})
	slow := func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		close(started)
		time.Sleep(d)
		return noop(ctx, ev)
	}
	first, err := b.wrap(slow, store)
	if err != nil {
		return WaitLoad{}, err
	}
	counting := &countingClaims{Store: store}
	dup, err := idempotency.Wrap(noop, idempotency.Config{
		Store: counting,
		Settings: idempotency.Settings{
			WaitForResult: 10 * time.Second,
			Logger:        slog.New(slog.NewJSONHandler(b.devnull, nil)),
			Metrics:       b.devnull,
		},
	})
	if err != nil {
		return WaitLoad{}, err
	}
	ev := postEvent("/noop", uuid.NewString(), uuid.NewString(), taskBody)
	done := make(chan error, 1)
	go func() {
		_, err := call(ctx, first, ev, false)
		done <- err
	}()
	<-started
	start := time.Now()
	_, dupErr := call(ctx, dup, ev, true)
	waited := time.Since(start)
	if err := <-done; err != nil {
		return WaitLoad{}, err
	}
	n := int(counting.claims.Load())
	return WaitLoad{
		HandlerMs:    float64(d.Milliseconds()),
		Claims:       n,
		WaitedMs:     float64(waited.Microseconds()) / 1000,
		ClaimsPerSec: float64(n) / waited.Seconds(),
		Replayed:     dupErr == nil,
	}, nil
}

// CreateTrips is the sample create (POST /tasks, the task API's handler
// under Wrap on PostgreSQL) through the delay proxy, with the key completed
// by the decorator after the insert, and in the insert's own batch
// (tasks.Options.Keys): latency side by side and round trips per create.
type CreateTrips struct {
	DelayMs float64 `json:"delay_ms"`
	Sides   []Side  `json:"sides"`
	// RoundTrips is round trips per create, by side name.
	RoundTrips map[string]float64 `json:"round_trips"`
}

// tripCounter counts a pool's round trips: one per query, one per batch.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *tripCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.n.Add(1)
	return ctx
}
func (c *tripCounter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *tripCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// createTrips measures the create both ways through the delay proxy.
func (b *bench) createTrips(ctx context.Context, p plan) (*CreateTrips, error) {
	u, err := url.Parse(b.db.url)
	if err != nil {
		return nil, err
	}
	host := u.Host
	if _, _, err := net.SplitHostPort(host); err != nil {
		host = net.JoinHostPort(host, "5432")
	}
	proxy, err := startDelayProxy(host, delayEachWay)
	if err != nil {
		return nil, err
	}
	defer proxy.Close()
	u.Host = proxy.Addr()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		return nil, err
	}
	counter := &tripCounter{}
	cfg.MaxConns = 4
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.ConnConfig.Tracer = counter
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	store := mustStore(pgstore.New(pool, nil))
	logger := slog.New(slog.NewJSONHandler(b.devnull, nil))
	res := &CreateTrips{DelayMs: ms(delayEachWay), RoundTrips: map[string]float64{}}
	var specs []sideSpec
	for _, side := range []struct {
		name string
		keys tasks.KeyCompleter
	}{
		{"create, key completed after the insert", nil},
		{"create, key completed in the insert's batch", store},
	} {
		api := tasks.NewAPI(tasks.NewService(pool), &tasks.Options{Logger: logger, Keys: side.keys})
		h, err := b.wrap(api.Create, store)
		if err != nil {
			return nil, err
		}
		user := uuid.NewString()
		create := func(ctx context.Context, _ int) (time.Duration, error) {
			return call(ctx, h, postEvent("/tasks", user, uuid.NewString(), taskBody), false)
		}
		// Round trips per create, counted over a few creates of their own.
		const n = 20
		before := counter.n.Load()
		for range n {
			if _, err := create(ctx, 0); err != nil {
				return nil, fmt.Errorf("%s: %w", side.name, err)
			}
		}
		res.RoundTrips[side.name] = float64(counter.n.Load()-before) / n
		specs = append(specs, sideSpec{side.name, create})
	}
	if res.Sides, err = compare(ctx, p, specs); err != nil {
		return nil, err
	}
	logSides("create delayed", res.Sides)
	return res, nil
}
