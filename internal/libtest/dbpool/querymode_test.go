package dbpool_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

func TestQueryModeRefusesUnknown(t *testing.T) {
	t.Parallel()
	_, err := dbpool.New(context.Background(), dbpool.Config{Auth: dbpool.AuthURL, URL: "postgres://u@127.0.0.1:1/db", QueryMode: "cached"})
	var ce *dbpool.ConfigError
	require.True(t, errors.As(err, &ce), "got %v", err)
	require.Contains(t, err.Error(), "QueryMode")
}

// TestQueryModes shows what each mode leaves on the server connection: the
// default keeps no prepared statement (what a transaction-pooling proxy
// needs), the prepared mode keeps one per statement.
func TestQueryModes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	for mode, want := range map[dbpool.QueryMode]int{"": 0, dbpool.QueryModeExec: 0, dbpool.QueryModePrepared: 1} {
		pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: url, MaxConns: 1, QueryMode: mode})
		require.NoError(t, err)
		for range 3 {
			var n int
			require.NoError(t, pool.QueryRow(ctx, "SELECT $1::int + 1", 41).Scan(&n))
			require.Equal(t, 42, n)
		}
		var prepared int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_statements WHERE statement LIKE 'SELECT $1::int + 1%'").Scan(&prepared))
		require.Equal(t, want, prepared, "mode %q", mode)
		pool.Close()
	}
}
