package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// DurabilityResult is ADR 009's premise: claim + complete on the UNLOGGED
// table against the same table LOGGED (and Redis), at several numbers of
// concurrent clients.
type DurabilityResult struct {
	// SeedRows is how many keys both tables held before each level.
	SeedRows int               `json:"seed_rows"`
	Levels   []DurabilityLevel `json:"levels"`
}

// DurabilityLevel is one number of concurrent clients.
type DurabilityLevel struct {
	Clients int    `json:"clients"`
	Sides   []Side `json:"sides"` // "UNLOGGED", "LOGGED", "Redis"
}

// storedResponse is a typical create response: 201, a Location and a task.
var storedResponse = idemstore.Response{
	StatusCode: 201,
	Headers: map[string]string{
		"Content-Type": "application/json",
		"Location":     "/tasks/0b6e9d9e-8f1f-4c55-9a0e-3f9d1c2b7a11",
	},
	Body: `{"id":"0b6e9d9e-8f1f-4c55-9a0e-3f9d1c2b7a11","title":"bench task","description":"measured by cmd/bench",` +
		`"status":"todo","due_date":null,"created_at":"2025-01-01T00:00:00Z","updated_at":"2025-01-01T00:00:00Z"}`,
}

const requestHash = "5d41402abc4b2a76b9719d911017c592e3b0c44298fc1c149afbf4c8996fb924"

// claimComplete is the store's part of a first request: claim a new key,
// then complete it with the response.
func claimComplete(store idemstore.Store) op {
	return func(ctx context.Context, _ int) (time.Duration, error) {
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
		start := time.Now()
		if err := claimNew(ctx, store, ref); err != nil {
			return 0, err
		}
		now := time.Now()
		err := store.Complete(ctx, idemstore.Completion{Ref: ref, Response: storedResponse, Now: now, ExpiresAt: now.Add(idempotency.DefaultTTL)})
		return time.Since(start), err
	}
}

var errNotClaimed = errors.New("a new key was not claimed")

func claimNew(ctx context.Context, store idemstore.Store, ref idemstore.Ref) error {
	now := time.Now()
	res, err := store.Claim(ctx, idemstore.Claim{
		Ref: ref, Fingerprint: requestHash, Now: now,
		LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(idempotency.DefaultTTL),
	})
	if err == nil && !res.Claimed {
		err = errNotClaimed
	}
	return err
}

const durabilitySeed = 10_000

func (b *bench) durability(ctx context.Context) error {
	cfg := b.cfg
	res := &DurabilityResult{SeedRows: durabilitySeed}
	b.res.Durability = res
	pool, err := b.db.newPool(ctx, int32(maxInt(cfg.durClients)+4))
	if err != nil {
		return err
	}
	defer pool.Close()
	specs := []sideSpec{
		{"UNLOGGED", claimComplete(mustStore(pgstore.New(pool, nil)))},
		{"LOGGED", claimComplete(mustStore(pgstore.New(pool, &pgstore.Options{Schema: b.db.loggedSchema()})))},
	}
	if b.redis != nil {
		specs = append(specs, sideSpec{"Redis", claimComplete(mustStore(redisstore.New(b.redis, nil)))})
	}
	for _, clients := range cfg.durClients {
		// Same data in both tables at the start of every level.
		if err := b.seedBoth(ctx); err != nil {
			return err
		}
		p := plan{reps: cfg.reps, clients: clients, dur: cfg.durDur, maxOps: cfg.maxOps, warm: cfg.warm}
		sides, err := compare(ctx, p, specs)
		if err != nil {
			return err
		}
		res.Levels = append(res.Levels, DurabilityLevel{Clients: clients, Sides: sides})
		logSides(fmt.Sprintf("%d clients", clients), sides)
	}
	return nil
}

// seedBoth empties both tables (and Redis) and gives them the same keys.
func (b *bench) seedBoth(ctx context.Context) error {
	pool := b.db.pool
	if _, err := pool.Exec(ctx, "TRUNCATE idempotency_keys, "+b.db.loggedTable()); err != nil {
		return err
	}
	if _, err := fillKeys(ctx, pool, "idempotency_keys", 0, durabilitySeed, false); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+b.db.loggedTable()+" SELECT * FROM idempotency_keys"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE idempotency_keys"); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+b.db.loggedTable()); err != nil {
		return err
	}
	if b.redis != nil {
		return b.redis.FlushDB(ctx).Err()
	}
	return nil
}

func maxInt(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
