// Package migrate applies the project's embedded migrations (package
// migrations) with pressly/goose, in the schema of the connection's
// search_path.
//
// Up checks first that pg_cron can be created, so that a server without it
// fails with a clear message before any migration is applied.
package migrate

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"

	"github.com/ichido/ichido/migrations"
)

// ErrNoPgCron is returned by Up when the server cannot run pg_cron.
var ErrNoPgCron = errors.New("migrate: pg_cron is not available on this server")

// Result is one applied (or rolled back) migration.
type Result struct {
	Version int64
	Name    string
}

// Up applies every pending migration and returns those it applied.
func Up(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	if err := checkPgCron(ctx, pool); err != nil {
		return nil, err
	}
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res, err := p.Up(ctx)
	return results(res), err
}

// Down rolls back the most recent migration.
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

// Reset rolls back every applied migration.
func Reset(ctx context.Context, pool *pgxpool.Pool) ([]Result, error) {
	p, db, err := provider(pool)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	res, err := p.DownTo(ctx, 0)
	return results(res), err
}

// Version returns the version of the newest applied migration (0 if none).
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

func checkPgCron(ctx context.Context, pool *pgxpool.Pool) error {
	var available, created, preloaded bool
	err := pool.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_cron'),
		EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron'),
		current_setting('shared_preload_libraries') LIKE '%pg_cron%'`).Scan(&available, &created, &preloaded)
	if err != nil {
		return fmt.Errorf("migrate: checking for pg_cron: %w", err)
	}
	switch {
	case !available:
		return fmt.Errorf("%w: the extension is not installed (Debian: apt-get install postgresql-15-cron; Aurora: add pg_cron to shared_preload_libraries in the cluster parameter group)", ErrNoPgCron)
	case !created && !preloaded:
		return fmt.Errorf("%w: set shared_preload_libraries = 'pg_cron' and cron.database_name to this database, then restart the server", ErrNoPgCron)
	}
	return nil
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
