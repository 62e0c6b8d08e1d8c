// Package apptest gives the sample app's tests a schema of their own with
// every migration of the app applied (internal/migrate: the key store's and
// the app's goose migrations). It is the app's wrapper of pgtest.NewWith;
// pgtest, in the testkit module, does not import the app's migrations, so
// that the library's module does not depend on goose.
package apptest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// New gives the test a fresh schema with migrate.Up applied. The schema (and
// its pg_cron jobs) is dropped when the test ends.
func New(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.NewWith(t, Up)
}

// Up applies every migration of the app in the schema of pool's
// search_path.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := migrate.Up(ctx, pool)
	return err
}
