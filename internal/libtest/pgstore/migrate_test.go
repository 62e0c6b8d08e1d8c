package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestMigrateIntoChosenSchema creates the key store in a schema of the
// user's choosing (quoted: mixed case), with its pg_cron job, then checks
// that a Store configured with that schema works whatever the connection's
// search_path, that a second call applies nothing, and that Uninstall
// removes everything, its job too.
func TestMigrateIntoChosenSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	schema := "Keys_" + db.Schema
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })

	res, err := pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Schema: schema})
	require.NoError(t, err)
	require.Equal(t, schema, res.Schema)
	require.Equal(t, []string{"0001_idempotency_keys.sql"}, res.Applied)
	require.NotNil(t, res.Purge)
	require.Equal(t, "purge-idempotency "+res.Purge.Database+`."`+schema+`"`, res.Purge.Name)
	require.Equal(t, `CALL "`+schema+`".purge_expired_idempotency_keys()`, res.PurgeCommand)

	var command, database string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT command, database FROM cron.job WHERE jobname = $1`, res.Purge.Name).Scan(&command, &database))
	require.Equal(t, `CALL "`+schema+`".purge_expired_idempotency_keys()`, command, "a mixed-case schema is quoted")
	var tablesInPath int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1`, db.Schema).Scan(&tablesInPath))
	require.Zero(t, tablesInPath, "nothing goes into the connection's own schema")

	st := must.Value(pgstore.New(db.Pool, &pgstore.Options{Schema: schema}))
	now := time.Now()
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
	claim := idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	got, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.True(t, got.Claimed)
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	_, err = db.Pool.Exec(ctx, `CALL "`+schema+`".purge_expired_idempotency_keys()`)
	require.NoError(t, err, "the purge procedure can be called from a scheduler of the user's own")

	again, err := pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Schema: schema})
	require.NoError(t, err)
	require.Empty(t, again.Applied, "a second call applies nothing")
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE jobname = $1`, res.Purge.Name).Scan(&jobs))
	require.Equal(t, 1, jobs, "the job is updated in place, not added twice")

	require.NoError(t, pgstore.Uninstall(ctx, db.Pool, &pgstore.MigrateOptions{Schema: schema}))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE jobname = $1`, res.Purge.Name).Scan(&jobs))
	require.Zero(t, jobs)
	var objects int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1)
		+ (SELECT count(*) FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1)`, schema).Scan(&objects))
	require.Zero(t, objects)
}

// TestMigrateCronOff schedules nothing: the user calls the purge from a
// scheduler of their own.
func TestMigrateCronOff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	res, err := pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Cron: pgstore.CronOff})
	require.NoError(t, err)
	require.Nil(t, res.Purge)
	require.Equal(t, db.Schema, res.Schema, "the connection's current schema by default")
	var jobs int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE command LIKE '%' || $1 || '.purge_expired_idempotency_keys()'`, db.Schema).Scan(&jobs))
	require.Zero(t, jobs)
	require.Equal(t, "CALL "+db.Schema+".purge_expired_idempotency_keys()", res.PurgeCommand, "what a scheduler of the user's own calls")

	_, err = pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Cron: "sometimes"})
	require.ErrorContains(t, err, "MigrateOptions.Cron")
}

// TestNoSequentialScanAfterEmptyAnalyze is the cached-plan hazard: the
// table is analysed while empty, a connection runs the claim often enough
// for its plans to be cached, the table then fills with 10,000 keys (no
// ANALYZE in between, autovacuum off), and the claim on that same
// connection must still read a handful of buffers per call, not every page.
// A copy of the claim's lookup without the functions' SET enable_seqscan =
// off shows, on the same connection, that the hazard is real here. The
// cluster is the test's own: on a busy shared one, catalog changes by other
// tests can overflow a session's invalidation queue and reset its plans,
// which would hide the hazard.
func TestNoSequentialScanAfterEmptyAnalyze(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var db struct {
		URL  string
		Pool *pgxpool.Pool
	}
	db.URL, db.Pool = analyzedEmpty(t)
	for _, s := range []string{
		// The hazard as it was: a lookup whose plan is cached unguarded.
		`CREATE FUNCTION unguarded_lookup(p_user_id uuid, p_key text) RETURNS text LANGUAGE plpgsql AS $$
		DECLARE s text;
		BEGIN
			SELECT k.status INTO s FROM idempotency_keys k WHERE k.user_id = p_user_id AND k.key = p_key;
			RETURN s;
		END $$`,
	} {
		_, err := db.Pool.Exec(ctx, s)
		require.NoError(t, err)
	}

	// One connection, open all along: the pool never has another. It sends
	// the functions' calls as a pool behind a proxy does (the prepared
	// path's own claim is TestPreparedClaimPlanAfterEmptyAnalyze's).
	conn := newPool(t, db.URL, func(c *pgxpool.Config) {
		c.MaxConns = 1
		c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	})
	onConn := must.Value(pgstore.New(conn, nil))
	var pid int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid))
	user := uuid.NewString()
	now := time.Now()
	claim := func(key, owner string) idemstore.Claim {
		return idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: key, Owner: owner}, Fingerprint: "h",
			Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	}
	// Every statement of the functions runs on the empty table (no page
	// yet), more often than the five custom plans after which a cached plan
	// may be kept for good. A claim without an owner (NULL, which no Store
	// call can send) runs its lookup and then fails on NOT NULL before its
	// insert writes a page.
	for range 10 {
		var s *string
		require.NoError(t, conn.QueryRow(ctx, `SELECT unguarded_lookup($1::uuid, $2::text)`, user, uuid.NewString()).Scan(&s))
	}
	for range 10 {
		var answer *string
		err := conn.QueryRow(ctx, `SELECT idempotency_key_claim($1::uuid, $2::text, 'h', NULL, now(), now() + interval '1 minute', now() + interval '1 hour')`,
			user, uuid.NewString()).Scan(&answer)
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, pgerrcode.NotNullViolation, pgErr.Code)
		ref := claim(uuid.NewString(), "first").Ref
		require.ErrorIs(t, onConn.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}), idemstore.ErrLeaseLost)
		require.ErrorIs(t, onConn.Release(ctx, ref), idemstore.ErrLeaseLost)
	}
	var emptyPages int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT pg_relation_size('idempotency_keys')`).Scan(&emptyPages))
	require.Zero(t, emptyPages, "the plans were made on an empty table")

	pages := fillTenThousand(t, db.Pool)

	buffers := func(sql string, args ...any) int {
		t.Helper()
		return planBuffers(t, conn, sql, args...)
	}
	args := func(c idemstore.Claim) []any {
		return []any{c.UserID, c.Key, c.Fingerprint, c.Owner, c.Now, c.LeaseUntil, c.ExpiresAt}
	}
	const claimSQL = `SELECT * FROM idempotency_key_claim($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::timestamptz)`

	// A key the lookup does not find is read to the end of a sequential
	// scan; one written after the fill sits at the end of the table.
	require.Greater(t, buffers(`SELECT unguarded_lookup($1::uuid, $2::text)`, user, uuid.NewString()), pages/2,
		"the unguarded copy should show the sequential scan its cached plan makes")
	late := claim(uuid.NewString(), "late")
	res, err := onConn.Claim(ctx, late)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.NoError(t, onConn.Complete(ctx, idemstore.Completion{Ref: late.Ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	// Each path is measured on its second call: the first call of a path in
	// a session also prepares its PL/pgSQL expressions, reading the catalog
	// once.
	buffers(claimSQL, args(claim(late.Key, "retry"))...)
	replay := buffers(claimSQL, args(claim(late.Key, "retry"))...)
	require.LessOrEqual(t, replay, 12, "a replay's claim reads %d buffers", replay)
	fresh := claim(uuid.NewString(), "first")
	first := buffers(claimSQL, args(fresh)...)
	require.LessOrEqual(t, first, 30, "a first claim reads %d buffers", first)
	done := buffers(`SELECT idempotency_key_complete($1::uuid, $2::text, $3::text, '{"status":201,"body":""}', 201, $4::timestamptz)`,
		fresh.UserID, fresh.Key, fresh.Owner, fresh.ExpiresAt)
	require.LessOrEqual(t, done, 30, "a completion reads %d buffers", done)
	gone := buffers(`SELECT idempotency_key_release($1::uuid, $2::text, $3::text)`, fresh.UserID, fresh.Key, "nobody")
	require.LessOrEqual(t, gone, 12, "a release reads %d buffers", gone)
	var pidAtEnd int
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pidAtEnd))
	require.Equal(t, pid, pidAtEnd, "the same server connection throughout")
}
