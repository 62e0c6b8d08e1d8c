package main

import (
	"context"
	"fmt"
	"log"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// GrowthResult is claim latency as the table grows, and during a purge.
type GrowthResult struct {
	Steps []GrowthStep `json:"steps"`
	Purge *PurgeResult `json:"purge,omitempty"`
}

// GrowthStep is claim latency with LiveKeys keys in the table.
type GrowthStep struct {
	LiveKeys int  `json:"live_keys"`
	Fill     Fill `json:"fill"`
	// Claim is one client claiming new keys (the first request's claim).
	Claim Side `json:"claim"`
}

// PurgeResult is CALL purge_expired_idempotency_keys() on ExpiredKeys
// expired keys beside LiveKeys live ones, with one client claiming new keys
// meanwhile, against the same client without a purge just before.
type PurgeResult struct {
	LiveKeys    int        `json:"live_keys"`
	ExpiredKeys int        `json:"expired_keys"`
	Fills       []Fill     `json:"fills"`
	Runs        []PurgeRun `json:"runs"`
	// PurgeSeconds is the median of the runs' durations.
	PurgeSeconds float64 `json:"purge_s"`
	// Baseline is claims without a purge, one run before each purge.
	Baseline Side `json:"baseline"`
	// During is claims while the purge runs.
	During Side `json:"during"`
	// timeline of the first run's claims, for the plot.
	timeline Run
}

// PurgeRun is one purge.
type PurgeRun struct {
	Seconds float64 `json:"seconds"`
	Deleted int64   `json:"deleted"`
	// Left is how many expired keys the purge left behind (none expected).
	Left int64 `json:"left"`
}

// claimOnly claims a new key and times only the claim.
func claimOnly(store idemstore.Store) op {
	return func(ctx context.Context, _ int) (time.Duration, error) {
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
		return timed(func() error { return claimNew(ctx, store, ref) })
	}
}

func (b *bench) growth(ctx context.Context) error {
	cfg := b.cfg
	res := &GrowthResult{}
	b.res.Growth = res
	pool := b.db.pool
	if _, err := pool.Exec(ctx, "TRUNCATE idempotency_keys, "+b.db.loggedTable()); err != nil {
		return err
	}
	claimPool, err := b.db.newPool(ctx, 2)
	if err != nil {
		return err
	}
	defer claimPool.Close()
	claim := claimOnly(mustStore(pgstore.New(claimPool, nil)))
	p := plan{reps: cfg.reps, clients: 1, dur: cfg.growthDur, maxOps: cfg.maxOps, warm: cfg.warm}

	rows := 0
	for _, size := range cfg.growthSizes {
		log.Printf("  filling to %d keys", size)
		fill, err := bulkFill(ctx, pool, rows, size-rows, false, size-rows >= 200_000)
		if err != nil {
			return err
		}
		rows = size
		log.Printf("  filled %d rows: insert %.1fs, indexes %.1fs, vacuum %.1fs, table %d MB", fill.Rows, fill.InsertSeconds, fill.IndexSeconds, fill.VacuumSeconds, fill.TableBytes>>20)
		sides, err := compare(ctx, p, []sideSpec{{"claim", claim}})
		if err != nil {
			return err
		}
		res.Steps = append(res.Steps, GrowthStep{LiveKeys: size, Fill: fill, Claim: sides[0]})
		logSides(fmt.Sprintf("%d keys", size), sides)
	}
	if cfg.purgeReps == 0 || cfg.purgeRows == 0 {
		return nil
	}
	pr := &PurgeResult{LiveKeys: rows, ExpiredKeys: cfg.purgeRows, Baseline: Side{Name: "claim, no purge"}, During: Side{Name: "claim during purge"}}
	res.Purge = pr
	var durations []float64
	for rep := range cfg.purgeReps {
		log.Printf("  adding %d expired keys", cfg.purgeRows)
		// Inserted into the live indexes: the purge's own cost is what is
		// measured, and rebuilding indexes of the whole table each time
		// would cost more than the insert.
		fill, err := bulkFill(ctx, pool, 100_000_000+rep*cfg.purgeRows, cfg.purgeRows, true, false)
		if err != nil {
			return err
		}
		pr.Fills = append(pr.Fills, fill)
		log.Printf("  filled %d expired rows: insert %.1fs, vacuum %.1fs", fill.Rows, fill.InsertSeconds, fill.VacuumSeconds)
		pr.Baseline.Runs = append(pr.Baseline.Runs, load(ctx, 1, 2*cfg.growthDur, cfg.maxOps, claim))

		var done atomic.Bool
		var run PurgeRun
		var purgeErr error
		finished := make(chan struct{})
		go func() {
			defer close(finished)
			defer done.Store(true)
			d, err := timed(func() error {
				_, err := pool.Exec(ctx, "CALL purge_expired_idempotency_keys()")
				return err
			})
			run.Seconds, purgeErr = d.Seconds(), err
		}()
		during := loadWhile(ctx, 1, cfg.maxOps, claim, func() bool { return !done.Load() })
		<-finished
		if purgeErr != nil {
			return fmt.Errorf("purge: %w", purgeErr)
		}
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM idempotency_keys WHERE expires_at < now()").Scan(&run.Left); err != nil {
			return err
		}
		run.Deleted = int64(cfg.purgeRows) - run.Left
		pr.Runs = append(pr.Runs, run)
		pr.During.Runs = append(pr.During.Runs, during)
		if rep == 0 {
			pr.timeline = during
		}
		durations = append(durations, run.Seconds)
		log.Printf("  purge %d: %.1fs, %d deleted, %d left; claim p99 %.3f ms (no purge %.3f ms)",
			rep+1, run.Seconds, run.Deleted, run.Left, during.P99Ms, pr.Baseline.Runs[rep].P99Ms)
	}
	pr.PurgeSeconds = median(durations)
	pr.Baseline.summarise()
	pr.During.summarise()
	return nil
}
