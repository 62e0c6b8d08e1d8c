package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestMain gives the Examples the DATABASE_URL a user's program would read:
// the shared test cluster's database unless one is set.
func TestMain(m *testing.M) {
	pgtest.MainWithDatabaseURL(m, nil)
}

// newDB gives the test a schema of its own with the key store created in it
// by pgstore.Migrate, as a user's program creates it (the sample app's
// tables are the app's, not the library's).
func newDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.NewWith(t, migrateStore)
}

// migrateStore creates the key store in the schema of pool's search_path.
func migrateStore(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pgstore.Migrate(ctx, pool, nil)
	return err
}
