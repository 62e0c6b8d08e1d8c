// Package migrate applies the sample app's migrations in the schema of the
// connection's search_path: the idempotency key store's own set
// (pgstore.Migrate, with its pg_cron schedule) and then the app's goose
// migrations of package migrations (the tasks table).
//
// Up checks pg_cron before applying anything: on a server without it, or
// where pg_cron keeps its jobs in another database (cron.database_name) in
// which the user cannot schedule the purge, Up fails with a message that
// says what to do and leaves the database as it was. When the user may,
// the purge is scheduled from that other database
// (cron.schedule_in_database), so the app's database need not be the cron
// database.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/ichido/ichido/migrations"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

var (
	// ErrNoPgCron is returned by Up when the server cannot run pg_cron
	// (pgstore.ErrNoPgCron).
	ErrNoPgCron = pgstore.ErrNoPgCron
	// ErrCronElsewhere is returned by Up when pg_cron keeps its jobs in
	// another database where the user cannot schedule the purge
	// (pgstore.ErrCronElsewhere).
	ErrCronElsewhere = pgstore.ErrCronElsewhere
)

// storePrefix names the key store's migrations in a Result.
const storePrefix = "pgstore/"

// Result is one applied (or rolled back) migration.
type Result struct {
	Version int64
	Name    string
}

// Up applies every pending migration, the key store's first, and returns
// those it applied. Nothing is applied when pg_cron cannot schedule the
// purge (ErrNoPgCron, ErrCronElsewhere).
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	store, err := pgstore.Migrate(ctx, pool, nil)
	if err != nil {
		return nil, err
	}
	var out []Result
	for _, name := range store.Applied {
		out = append(out, storeResult(name))
	}
	p, db, err := provider(pool)
	if err != nil {
		return out, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	return append(out, results(res)...), err
}

// Down rolls back the most recent migration of the app's own set (the key
// store stays; Reset removes it).
func Down(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r, err := p.Down(ctx)
	if r == nil {
		return nil, err
	}
	return results([]*goose.MigrationResult{r}), err
}

// Reset rolls back every applied migration of the app's set, then removes
// the key store and its pg_cron job (pgstore.Uninstall).
func Reset(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res, err := p.DownTo(ctx, 0)
	out := results(res)
	if err != nil {
		return out, err
	}
	store, err := storeVersions(ctx, pool)
	if err != nil {
		return out, err
	}
	if err := pgstore.Uninstall(ctx, pool, nil); err != nil {
		return out, err
	}
	for i := len(store) - 1; i >= 0; i-- {
		out = append(out, storeResult(store[i]))
	}
	return out, nil
}

// storeVersions lists the key store's applied migrations in the current
// schema, oldest first (none when it is not there).
func storeVersions(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var exists bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('idempotency_store_version') IS NOT NULL`).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT split_part(name, ' ', 1) FROM idempotency_store_version ORDER BY version`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func storeResult(name string) Result {
	v, _ := strconv.ParseInt(strings.SplitN(name, "_", 2)[0], 10, 64)
	return Result{Version: v, Name: storePrefix + name}
}

// Version returns the version of the newest applied migration of the
// app's own set (0 if none).
func Version(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	p, db, err := provider(pool)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	return p.GetDBVersion(ctx)
}

func provider(pool *pgxpool.Pool) (*goose.Provider, *sql.DB, error) {
	db := stdlib.OpenDBFromPool(pool)
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations.FS)
	if err != nil {
		db.Close()
		return nil, nil, fmt.Errorf("migrate: %w", err)
	}
	return p, db, nil
}

func results(rs []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		if r == nil || r.Source == nil {
			continue
		}
		out = append(out, Result{Version: r.Source.Version, Name: r.Source.Path})
	}
	return out
}
