package pgstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// The tests of this package that need PostgreSQL connect to the server that
// PGSTORE_TEST_DATABASE names, as pgx's own tests do with PGX_TEST_DATABASE,
// and are skipped without it. make test sets it to the repository's private
// server, where the store's other tests run too.
const envDatabase = "PGSTORE_TEST_DATABASE"

// testDB is a pool whose search_path is a new schema holding the key store.
// The schema and its purge job are dropped when the test ends.
func testDB(t *testing.T) *pgxpool.Pool {
	t.Helper()
	base := os.Getenv(envDatabase)
	if base == "" {
		t.Skipf("%s is not set: this test needs a PostgreSQL server (make test sets it)", envDatabase)
	}
	ctx := context.Background()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_" + hex.EncodeToString(b)

	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	_, err = admin.Exec(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)

	cfg, err := pgxpool.ParseConfig(base)
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE '%-' || $1
			OR (database = current_database() AND command = format('CALL %I.purge_expired_idempotency_keys()', $1::text))`, schema)
		_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	_, err = pgstore.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	return pool
}
