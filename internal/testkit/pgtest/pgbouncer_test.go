package pgtest_test

import (
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

func TestPgBouncer(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	serverURL, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	cfg, err := pgx.ParseConfig(serverURL)
	require.NoError(t, err)

	b := pgtest.PgBouncerFor(t, serverURL, pgtest.PgBouncerOptions{})

	// A query reaches the real server through pgbouncer.
	conn, err := pgx.Connect(ctx, b.URL("postgres", cfg.Database))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var db string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_database()", pgx.QueryExecModeExec).Scan(&db))
	require.Equal(t, cfg.Database, db)

	// The admin console confirms transaction pooling.
	admin, err := pgx.Connect(ctx, b.URL("postgres", "pgbouncer")+"&default_query_exec_mode=simple_protocol")
	require.NoError(t, err)
	defer admin.Close(context.Background())
	rows, err := admin.Query(ctx, "SHOW CONFIG")
	require.NoError(t, err)
	config := map[string]string{}
	for rows.Next() {
		vals, err := rows.Values()
		require.NoError(t, err)
		if k, ok := vals[0].(string); ok {
			v, _ := vals[1].(string)
			config[k] = v
		}
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "transaction", config["pool_mode"])

	dir := b.Dir
	require.NoError(t, b.Stop())
	_, err = os.Stat(dir)
	require.True(t, os.IsNotExist(err), "Stop removes the directory")
	_, err = pgx.Connect(ctx, b.URL("postgres", cfg.Database))
	require.Error(t, err, "pgbouncer is gone after Stop")
}
