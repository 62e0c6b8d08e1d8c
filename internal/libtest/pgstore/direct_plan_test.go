package pgstore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestPreparedClaimPlanAfterEmptyAnalyze is ADR 0025's hazard on the
// prepared path, whose claim is a plain statement that the server plans
// once per connection: an ANALYZE of the empty table, plans made while the
// table is tiny, then a fill without ANALYZE. On one connection, open all
// along, the store's claim and an unguarded copy of the same statement
// (prepared by hand, planned the usual way) each run on the tiny table more
// often than the five custom plans after which a generic plan is kept; after
// the fill the copy's kept plan scans the whole table, and the store's
// claim reads a handful of buffers. The cluster is the test's own, as in
// TestNoSequentialScanAfterEmptyAnalyze.
func TestPreparedClaimPlanAfterEmptyAnalyze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url, admin := analyzedEmpty(t)
	conn := newPool(t, url, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	})
	st := must.Value(pgstore.New(conn, nil))
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	now := time.Now()
	claim := func(user, key, owner string) idemstore.Claim {
		return idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: key, Owner: owner}, Fingerprint: "h",
			Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	first := claim(uuid.NewString(), uuid.NewString(), "first")
	res, err := st.Claim(ctx, first)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: first.Ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	claimSQL := claimStatement(t, conn, "")
	_, err = conn.Exec(ctx, `PREPARE unguarded (uuid, text, text, text, timestamptz, timestamptz, timestamptz) AS `+claimSQL, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	retry := claim(first.UserID, first.Key, "retry")
	literal := func(c idemstore.Claim) string {
		ts := func(t time.Time) string { return "'" + t.Format(time.RFC3339Nano) + "'" }
		return fmt.Sprintf("('%s', '%s', '%s', '%s', %s, %s, %s)", c.UserID, c.Key, c.Fingerprint, c.Owner, ts(c.Now), ts(c.LeaseUntil), ts(c.ExpiresAt))
	}
	for range 10 {
		res, err := st.Claim(ctx, retry)
		require.NoError(t, err)
		require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
		_, err = conn.Exec(ctx, `EXECUTE unguarded`+literal(retry), pgx.QueryExecModeSimpleProtocol)
		require.NoError(t, err)
	}
	var smallPages int
	require.NoError(t, admin.QueryRow(ctx, `SELECT pg_relation_size('idempotency_keys') / current_setting('block_size')::int`).Scan(&smallPages))
	require.LessOrEqual(t, smallPages, 2, "the plans were made on a tiny table")

	pages := fillTenThousand(t, admin)

	var cached string
	require.NoError(t, conn.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement = $1 AND name <> 'unguarded'`, claimSQL).Scan(&cached))
	buffers := func(statement string, c idemstore.Claim) int {
		t.Helper()
		return planBuffers(t, conn, `EXECUTE `+statement+literal(c), pgx.QueryExecModeSimpleProtocol)
	}
	require.Greater(t, buffers("unguarded", retry), pages/2, "the unguarded copy should show the sequential scan its kept plan makes")
	replay := buffers(pgx.Identifier{cached}.Sanitize(), retry)
	require.LessOrEqual(t, replay, 12, "a replay's claim reads %d buffers", replay)
	fresh := buffers(pgx.Identifier{cached}.Sanitize(), claim(uuid.NewString(), uuid.NewString(), "new"))
	require.LessOrEqual(t, fresh, 40, "a first claim reads %d buffers", fresh)

	var pidAtEnd int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pidAtEnd))
	require.Equal(t, pid, pidAtEnd, "the same server connection throughout")
}

// fillTenThousand adds 10,000 completed records to the key table of
// pool's search path, without ANALYZE, and returns the table's pages.
func fillTenThousand(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO idempotency_keys (key, user_id, request_hash, status, response_body, status_code, owner, created_at, expires_at)
		SELECT gen_random_uuid()::text, gen_random_uuid(), 'h', 'completed', '{"status":201,"body":"{}"}', 201, 'o', now(), now() + interval '1 hour'
		FROM generate_series(1, 10000)`)
	require.NoError(t, err)
	var pages int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT pg_relation_size('idempotency_keys') / current_setting('block_size')::int`).Scan(&pages))
	require.Greater(t, pages, 50, "the table must be large enough for a sequential scan to show")
	return pages
}

// planBuffers returns the shared buffers that one statement read on conn,
// from EXPLAIN (ANALYZE, BUFFERS).
func planBuffers(t *testing.T, conn *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var plan []struct {
		Plan struct {
			Hit  int `json:"Shared Hit Blocks"`
			Read int `json:"Shared Read Blocks"`
		} `json:"Plan"`
	}
	var js []byte
	require.NoError(t, conn.QueryRow(context.Background(), `EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) `+sql, args...).Scan(&js))
	require.NoError(t, json.Unmarshal(js, &plan))
	return plan[0].Plan.Hit + plan[0].Plan.Read
}

// TestPreparedClaimPlannedPerSchema has two stores of two schemas share a
// connection: each store's claim, a statement of its own, gets its generic
// plan made on the connection's first use by that store, before any
// custom plan.
func TestPreparedClaimPlannedPerSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	one, two := newDB(t), newDB(t)
	conn := newPool(t, one.URL, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
	})
	now := time.Now()
	for _, schema := range []string{one.Schema, two.Schema} {
		st := must.Value(pgstore.New(conn, &pgstore.Options{Schema: schema}))
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
		res, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.True(t, res.Claimed)
		var generic, custom int
		require.NoError(t, conn.QueryRow(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements WHERE statement = $1`,
			pgx.QueryExecModeSimpleProtocol, claimStatement(t, conn, schema)).Scan(&generic, &custom))
		require.Equal(t, 1, generic, "%s: the claim's generic plan was made on the connection's first use", schema)
		require.Equal(t, 1, custom, "%s: the claim itself was planned for the table as it is", schema)
		_, found, err := st.Get(ctx, ref.UserID, ref.Key)
		require.NoError(t, err)
		require.True(t, found, "%s: the claim was kept in its own schema", schema)
	}
}

// analyzedEmpty starts a cluster of the test's own with the key store in
// it, autovacuum off on its table and the table analysed empty: the
// statistics under which a plan made now is a sequential scan. It returns
// the cluster's URL and a pool on it in exec mode.
func analyzedEmpty(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: t.TempDir() + "/data", NoCron: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Destroy() })
	admin := newPool(t, cluster.URL(""), func(c *pgxpool.Config) { c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec })
	_, err = pgstore.Migrate(ctx, admin, &pgstore.MigrateOptions{Cron: pgstore.CronOff})
	require.NoError(t, err)
	for _, s := range []string{`ALTER TABLE idempotency_keys SET (autovacuum_enabled = false)`, `ANALYZE idempotency_keys`} {
		_, err := admin.Exec(ctx, s)
		require.NoError(t, err)
	}
	return cluster.URL(""), admin
}

// claimStatement is the text of the store's prepared claim as
// pg_prepared_statements holds it for the connection of pool (one
// connection): the read of the key table inside coalesce with the claim
// function, in schema (empty: the connection's only one).
func claimStatement(t *testing.T, pool *pgxpool.Pool, schema string) string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT statement FROM pg_prepared_statements WHERE statement LIKE 'SELECT coalesce((SELECT CASE%'`, pgx.QueryExecModeSimpleProtocol)
	require.NoError(t, err)
	statements, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	statements = slices.DeleteFunc(statements, func(s string) bool { return !strings.Contains(s, schema) })
	require.Len(t, statements, 1, "the store's claim on a direct connection is prepared once in schema %q", schema)
	return statements[0]
}
