package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs a statement: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// PurgeOptions configures Purge. A nil *PurgeOptions means all defaults.
type PurgeOptions struct {
	// Schema is the key store's schema, as in Options. Defaults to the
	// connection's search_path.
	Schema string
	// BatchSize is how many expired records one statement deletes.
	// Defaults to 5000, as the pg_cron job's purge.
	BatchSize int
	// MaxBatches bounds the statements of one call. Defaults to 2000.
	MaxBatches int
}

// Purge deletes expired records for a server without pg_cron, in batches
// of one statement each, and returns how many it deleted. Any number of
// tasks may call it at once: each batch skips the rows another holds. On a
// pool each batch commits by itself. Inside a transaction (db a pgx.Tx) the
// batches commit or roll back with it, and their rows stay locked until
// then.
func Purge(ctx context.Context, db Execer, opts *PurgeOptions) (int64, error) {
	o := PurgeOptions{BatchSize: 5000, MaxBatches: 2000}
	if opts != nil {
		o.Schema = opts.Schema
		if opts.BatchSize > 0 {
			o.BatchSize = opts.BatchSize
		}
		if opts.MaxBatches > 0 {
			o.MaxBatches = opts.MaxBatches
		}
	}
	table := pgx.Identifier{"idempotency_keys"}.Sanitize()
	if o.Schema != "" {
		table = pgx.Identifier{o.Schema, "idempotency_keys"}.Sanitize()
	}
	sql := `DELETE FROM ` + table + ` WHERE ctid = ANY (ARRAY(
		SELECT ctid FROM ` + table + ` WHERE expires_at < now() LIMIT $1 FOR UPDATE SKIP LOCKED))`
	var total int64
	for range o.MaxBatches {
		tag, err := db.Exec(ctx, sql, o.BatchSize)
		if err != nil {
			return total, fmt.Errorf("pgstore: purging expired records: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(o.BatchSize) {
			break
		}
	}
	return total, nil
}
