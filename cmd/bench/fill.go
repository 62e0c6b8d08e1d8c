package main

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Fill is how long putting rows into the key table took.
type Fill struct {
	Rows int `json:"rows"`
	// Expired rows expired an hour ago; the others expire in 23 hours.
	Expired       bool    `json:"expired"`
	InsertSeconds float64 `json:"insert_s"`
	// IndexSeconds is the rebuild of the indexes, for fills large enough
	// that dropping and rebuilding them beats inserting into them.
	IndexSeconds  float64 `json:"index_s"`
	VacuumSeconds float64 `json:"vacuum_analyze_s"`
	// CheckpointSeconds is the CHECKPOINT after the fill (0 when not allowed).
	CheckpointSeconds float64 `json:"checkpoint_s"`
	TableBytes        int64   `json:"table_bytes"`
}

// fillKeys inserts n completed keys numbered from, from+n-1 into table, in
// one INSERT … SELECT generate_series per CPU. Keys are UUIDs made from
// their number, so fills never collide, and every 20 consecutive keys share
// a user. Each row holds a typical stored create response.
func fillKeys(ctx context.Context, pool *pgxpool.Pool, table string, from, n int, expired bool) (time.Duration, error) {
	times := `now() - interval '1 hour', now() + interval '23 hours'`
	if expired {
		times = `now() - interval '25 hours', now() - interval '1 hour'`
	}
	env := fmt.Sprintf(`{"status":201,"headers":{"Content-Type":"application/json","Location":%q},"body":%q}`,
		storedResponse.Headers["Location"], storedResponse.Body)
	sql := `INSERT INTO ` + table + ` (key, user_id, request_hash, status, response_body, status_code, owner, lease_expires_at, created_at, expires_at)
SELECT md5(i::text || 'key')::uuid::text, md5((i / 20)::text)::uuid, '` + requestHash + `', 'completed', '` +
		strings.ReplaceAll(env, "'", "''") + `'::jsonb, 201, md5(i::text || 'owner'), NULL, ` + times + `
FROM generate_series($1::bigint, $2::bigint) AS i`
	start := time.Now()
	parts := 1
	if n >= 100_000 {
		parts = 2 // two cores
	}
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for p := range parts {
		lo := from + p*n/parts
		hi := from + (p+1)*n/parts - 1
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[p] = pool.Exec(ctx, sql, lo, hi)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return 0, fmt.Errorf("filling %s: %w", table, err)
		}
	}
	return time.Since(start), nil
}

// bulkFill adds n keys to idempotency_keys as fast as the server can: for a
// large n (rebuild) it drops the table's indexes, inserts, and builds them
// again (sorting beats n random B-tree inserts), then VACUUM ANALYZE and a
// CHECKPOINT.
func bulkFill(ctx context.Context, pool *pgxpool.Pool, from, n int, expired, rebuild bool) (Fill, error) {
	f := Fill{Rows: n, Expired: expired}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return f, err
	}
	defer conn.Release()
	var pk, pkName string
	var indexes []string
	if rebuild {
		if err := conn.QueryRow(ctx, `SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint
WHERE conrelid = 'idempotency_keys'::regclass AND contype = 'p'`).Scan(&pkName, &pk); err != nil {
			return f, fmt.Errorf("reading the primary key: %w", err)
		}
		rows, err := conn.Query(ctx, `SELECT indexdef FROM pg_indexes
WHERE schemaname = current_schema() AND tablename = 'idempotency_keys' AND indexname <> $1`, pkName)
		if err != nil {
			return f, err
		}
		if indexes, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return f, err
		}
		if _, err := conn.Exec(ctx, "ALTER TABLE idempotency_keys DROP CONSTRAINT "+pgx.Identifier{pkName}.Sanitize()); err != nil {
			return f, err
		}
		if _, err := conn.Exec(ctx, `DO $$ DECLARE r record; BEGIN
FOR r IN SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND tablename = 'idempotency_keys' LOOP
EXECUTE format('DROP INDEX %I', r.indexname); END LOOP; END $$`); err != nil {
			return f, err
		}
	}
	d, err := fillKeys(ctx, pool, "idempotency_keys", from, n, expired)
	if err != nil {
		return f, err
	}
	f.InsertSeconds = d.Seconds()
	if rebuild {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SET maintenance_work_mem = '512MB'"); err != nil {
			return f, err
		}
		if _, err := conn.Exec(ctx, "ALTER TABLE idempotency_keys ADD CONSTRAINT "+pgx.Identifier{pkName}.Sanitize()+" "+pk); err != nil {
			return f, fmt.Errorf("rebuilding the primary key: %w", err)
		}
		for _, def := range indexes {
			if _, err := conn.Exec(ctx, def); err != nil {
				return f, fmt.Errorf("rebuilding %s: %w", def, err)
			}
		}
		if _, err := conn.Exec(ctx, "RESET maintenance_work_mem"); err != nil {
			return f, err
		}
		f.IndexSeconds = time.Since(start).Seconds()
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, "VACUUM ANALYZE idempotency_keys"); err != nil {
		return f, err
	}
	f.VacuumSeconds = time.Since(start).Seconds()
	// Write the fill's dirty pages back now, so that the checkpointer does
	// not do it during the next measurement. Needs a superuser (or
	// pg_checkpoint); without one the measurement just runs as it is.
	start = time.Now()
	if _, err := conn.Exec(ctx, "CHECKPOINT"); err == nil {
		f.CheckpointSeconds = time.Since(start).Seconds()
	}
	err = conn.QueryRow(ctx, "SELECT pg_total_relation_size('idempotency_keys')").Scan(&f.TableBytes)
	return f, err
}
