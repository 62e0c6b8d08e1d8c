package pgstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestPurgeConcurrentAndInTransactions: many tasks may purge at once and
// together delete every expired record once; inside a transaction the
// purge commits or rolls back with it; a live record is never deleted.
func TestPurgeConcurrentAndInTransactions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	seed := func(n int) {
		_, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, user_id, request_hash, status, owner, created_at, expires_at, lease_expires_at)
			SELECT gen_random_uuid()::text, gen_random_uuid(), 'h', 'completed', 'o', now() - interval '2 hours', now() - interval '1 hour', now() - interval '2 hours'
			FROM generate_series(1, $1)`, n)
		require.NoError(t, err)
	}
	count := func() (n int) {
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n))
		return n
	}
	_, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys (key, user_id, request_hash, status, owner, created_at, expires_at, lease_expires_at)
		VALUES (gen_random_uuid()::text, gen_random_uuid(), 'h', 'in_progress', 'o', now(), now() + interval '1 hour', now() + interval '1 minute')`)
	require.NoError(t, err)

	seed(1000)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var total int64
	for range 4 {
		wg.Go(func() {
			n, err := pgstore.Purge(ctx, db.Pool, &pgstore.PurgeOptions{BatchSize: 50})
			require.NoError(t, err)
			mu.Lock()
			total += n
			mu.Unlock()
		})
	}
	wg.Wait()
	require.Equal(t, int64(1000), total, "every expired record deleted once")
	require.Equal(t, 1, count(), "the live record stays")

	seed(10)
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	n, err := pgstore.Purge(ctx, tx, nil)
	require.NoError(t, err)
	require.Equal(t, int64(10), n)
	require.NoError(t, tx.Rollback(ctx))
	require.Equal(t, 11, count(), "rolled back with its transaction")

	tx, err = db.Pool.Begin(ctx)
	require.NoError(t, err)
	_, err = pgstore.Purge(ctx, tx, nil)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	require.Equal(t, 1, count())
}
