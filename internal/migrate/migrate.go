// Package migrate applies the sample app's migrations in the schema of the
// connection's search_path: the idempotency key store's own set
// (pgstore.Migrate, with its pg_cron schedule) and then the app's goose
// migrations of package migrations (the tasks table).
//
// Up checks pg_cron before applying anything: on a server without it, or
// where pg_cron keeps its jobs in another database (cron.database_name) in
// which the user cannot schedule the purge, Up fails with a message that
// says what to do and leaves the database as it was. When the user may,
// the key store's purge is scheduled from that other database
// (cron.schedule_in_database). The app's own migrations that schedule
// pg_cron jobs themselves need the cron database: in another one Up refuses
// them, again before applying anything, and says to create only the key
// store there with pgstore.Migrate.
package migrate

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"path"
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
	// (pgstore.ErrCronElsewhere, whose message gives the grants that let
	// it, pgstore.CronGrants).
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
// purge (ErrNoPgCron, ErrCronElsewhere), nor when a pending migration of the
// app's own set schedules a pg_cron job itself and this is not the database
// pg_cron runs in (ErrCronElsewhere: run Up there, or create only the key
// store with pgstore.Migrate, which schedules from the cron database).
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	if err := checkAppCron(ctx, pool); err != nil {
		return nil, err
	}
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

// checkAppCron refuses, before anything is applied, to run pending app
// migrations that call pg_cron in a database that is not pg_cron's.
func checkAppCron(ctx context.Context, pool *pgxpool.Pool) error {
	p, db, err := provider(pool)
	if err != nil {
		return err
	}
	defer db.Close()
	// GetDBVersion would create goose's version table: look first.
	var current int64
	var tracked bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('goose_db_version') IS NOT NULL`).Scan(&tracked); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if tracked {
		if current, err = p.GetDBVersion(ctx); err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
	}
	var needs []string
	for _, src := range p.ListSources() {
		if src.Version <= current {
			continue
		}
		text, err := fs.ReadFile(migrations.FS, path.Base(src.Path))
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		up, _, _ := strings.Cut(string(text), "-- +goose Down")
		if strings.Contains(up, "cron.") {
			needs = append(needs, path.Base(src.Path))
		}
	}
	if len(needs) == 0 {
		return nil
	}
	var here, cronDB string
	var hasExt bool
	if err := pool.QueryRow(ctx, `SELECT current_database(), EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')`).Scan(&here, &hasExt); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	var setting *string
	if err := pool.QueryRow(ctx, `SELECT current_setting('cron.database_name', true)`).Scan(&setting); err == nil && setting != nil {
		cronDB = *setting
	} else if hasExt {
		cronDB = here // the extension exists in pg_cron's database only
	}
	if cronDB == "" || cronDB == here {
		return nil // pgstore.Migrate reports a missing pg_cron
	}
	return &appCronError{msg: fmt.Sprintf("migrate: this is database %q, and pg_cron runs its jobs in database %q (cron.database_name); "+
		"the app's migrations %s schedule pg_cron jobs of their own, which works only there, whoever connects. "+
		"Either apply them in %q (point DATABASE_URL at it), or set cron.database_name = '%s' in postgresql.conf and restart the server. "+
		"Nothing was applied. (To create only the idempotency key store here, use pgstore.Migrate or go run ./cmd/keystore: it schedules its purge from %q.)",
		here, cronDB, strings.Join(needs, ", "), cronDB, here, cronDB)}
}

// appCronError is checkAppCron's refusal: not a missing permission (a
// superuser gets it too) but the wrong database. It matches
// ErrCronElsewhere.
type appCronError struct{ msg string }

func (e *appCronError) Error() string { return e.msg }
func (e *appCronError) Unwrap() error { return ErrCronElsewhere }

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
