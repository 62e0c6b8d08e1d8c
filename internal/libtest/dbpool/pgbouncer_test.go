package dbpool_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestQueryModeThroughTransactionPooling sends parameterised queries from
// two pools through a pgbouncer in transaction pooling mode that has a
// single server connection, so every client shares it. With pgx's default
// mode the second client's named prepared statement collides with the
// first's on that server connection; the dbpool's mode keeps no statement
// beyond a query and works.
func TestQueryModeThroughTransactionPooling(t *testing.T) {
	t.Parallel()
	serverURL, err := pgtest.SharedURL(t.Context())
	require.NoError(t, err)
	server, err := pgx.ParseConfig(serverURL)
	require.NoError(t, err)
	b := pgtest.PgBouncerFor(t, serverURL, pgtest.PgBouncerOptions{Settings: map[string]string{"default_pool_size": "1"}})
	url := b.URL("postgres", server.Database)

	const query = "SELECT $1::int + $2::int, $3::text"
	t.Run("pgx default mode breaks", func(t *testing.T) {
		var failures []error
		for range 2 {
			conn, err := pgx.Connect(t.Context(), url)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var sum int
			var s string
			if err := conn.QueryRow(t.Context(), query, 1, 2, "x").Scan(&sum, &s); err != nil {
				failures = append(failures, err)
			}
		}
		require.Len(t, failures, 1, "the second client's prepared statement collides with the first's")
		var pgErr *pgconn.PgError
		require.ErrorAs(t, failures[0], &pgErr)
		require.Equal(t, pgerrcode.DuplicatePreparedStatement, pgErr.Code)
	})

	t.Run("dbpool works", func(t *testing.T) {
		pools := make([]*pgxpool.Pool, 2)
		for i := range pools {
			pool, err := dbpool.New(t.Context(), dbpool.Config{Auth: dbpool.AuthURL, URL: url})
			require.NoError(t, err)
			defer pool.Close()
			require.Equal(t, pgx.QueryExecModeExec, pool.Config().ConnConfig.DefaultQueryExecMode)
			pools[i] = pool
		}
		var wg sync.WaitGroup
		errs := make(chan error, 2*4*25)
		for _, pool := range pools {
			for w := range 4 {
				wg.Go(func() {
					for i := range 25 {
						var sum int
						var s string
						if err := pool.QueryRow(t.Context(), query, w, i, "x").Scan(&sum, &s); err != nil {
							errs <- err
						} else if sum != w+i || s != "x" {
							errs <- fmt.Errorf("got %d, %q; want %d, %q", sum, s, w+i, "x")
						}
					}
				})
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
		// A transaction holds its server connection to the end.
		err := pgx.BeginFunc(t.Context(), pools[0], func(tx pgx.Tx) error {
			_, err := tx.Exec(t.Context(), "SELECT set_config('application_name', 'in-tx', true)")
			if err != nil {
				return err
			}
			var name string
			if err := tx.QueryRow(t.Context(), "SELECT current_setting('application_name')").Scan(&name); err != nil {
				return err
			}
			require.Equal(t, "in-tx", name)
			return nil
		})
		require.NoError(t, err)
	})
}

// TestStoreConformanceThroughPgBouncer runs the idempotency store's
// conformance suite on pools from dbpool.New that go through pgbouncer in
// transaction pooling mode, one pool per case as one per execution
// environment. The store names its schema, so no search_path (a startup
// parameter pgbouncer would refuse) is needed.
func TestStoreConformanceThroughPgBouncer(t *testing.T) {
	t.Parallel()
	db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pgstore.Migrate(ctx, pool, nil)
		return err
	})
	serverURL, err := pgtest.SharedURL(t.Context())
	require.NoError(t, err)
	server, err := pgx.ParseConfig(serverURL)
	require.NoError(t, err)
	b := pgtest.PgBouncerFor(t, serverURL, pgtest.PgBouncerOptions{})

	storeVia := func(t *testing.T, b *pgtest.PgBouncer) idemstore.Store {
		pool, err := dbpool.New(context.Background(), dbpool.Config{Auth: dbpool.AuthURL, URL: b.URL("postgres", server.Database)})
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		return must.Value(pgstore.New(pool, &pgstore.Options{Schema: db.Schema}))
	}
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		return storeVia(t, b)
	}, // A proxy that went away after the pool connected through it.
		NewBrokenStore: func(t *testing.T) idemstore.Store {
			gone := pgtest.PgBouncerFor(t, serverURL, pgtest.PgBouncerOptions{})
			st := storeVia(t, gone)
			require.NoError(t, gone.Stop())
			return st
		}})
}
