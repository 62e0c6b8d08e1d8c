package keystore_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

func TestKeystoreCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	schema := "ks_" + db.Schema
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })
	env := func(string) string { return "" }

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"-database-url", db.URL, "-schema", schema}, &out, env))
	require.Contains(t, out.String(), "applied 0001_idempotency_keys.sql")
	var database string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_database()`).Scan(&database))
	require.Contains(t, out.String(), `pg_cron job "purge-idempotency `+database+`.`+schema+`"`)

	out.Reset()
	require.NoError(t, run(ctx, []string{"-schema", schema, "-no-cron"}, &out, func(string) string { return db.URL }))
	require.Contains(t, out.String(), "up to date")
	require.Contains(t, out.String(), "not scheduled")

	out.Reset()
	require.NoError(t, run(ctx, []string{"-database-url", db.URL, "-schema", schema, "-uninstall"}, &out, env))
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, schema).Scan(&n))
	require.Zero(t, n)

	require.ErrorContains(t, run(ctx, nil, &out, env), "DATABASE_URL")
}

// TestKeystoreNoCronPrintsARunnableCall: with -no-cron the command prints
// the purge's CALL for the user's own scheduler, with a mixed-case schema
// quoted, and that statement runs.
func TestKeystoreNoCronPrintsARunnableCall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	schema := "Keys_" + db.Schema
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })

	var out bytes.Buffer
	require.NoError(t, run(ctx, []string{"-database-url", db.URL, "-schema", schema, "-no-cron"}, &out, func(string) string { return "" }))
	want := `CALL "` + schema + `".purge_expired_idempotency_keys()`
	require.Contains(t, out.String(), "purge: not scheduled; call "+want+" hourly")
	_, call, ok := strings.Cut(out.String(), "purge: not scheduled; call ")
	require.True(t, ok)
	call, _, _ = strings.Cut(call, " hourly")
	_, err = db.Pool.Exec(ctx, call)
	require.NoError(t, err, "the printed statement runs: %s", call)
}
