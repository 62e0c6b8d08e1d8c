package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// admin returns a pool on the cron database of the test cluster (the
// shared URL's), as its superuser.
func admin(t *testing.T) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	pool := newPool(t, base, nil)
	var here, cronDB string
	require.NoError(t, pool.QueryRow(ctx, `SELECT current_database(), current_setting('cron.database_name')`).Scan(&here, &cronDB))
	require.Equal(t, cronDB, here, "the shared URL names the cron database")
	return pool, base
}

// databaseURL returns base with another database.
func databaseURL(t *testing.T, base, db string) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + db
	return u.String()
}

// cronJob is a row of cron.job.
type cronJob struct{ name, command, database string }

// jobsFor returns the pg_cron jobs that run in database db and call the
// purge of schema, whatever their name.
func jobsFor(t *testing.T, cron *pgxpool.Pool, db, quotedSchema string) []cronJob {
	t.Helper()
	rows, err := cron.Query(context.Background(), `SELECT jobname, command, database FROM cron.job
		WHERE database = $1 AND command = 'CALL ' || $2 || '.purge_expired_idempotency_keys()' ORDER BY jobid`, db, quotedSchema)
	require.NoError(t, err)
	defer rows.Close()
	var jobs []cronJob
	for rows.Next() {
		var j cronJob
		require.NoError(t, rows.Scan(&j.name, &j.command, &j.database))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	return jobs
}

// runAsCron runs a job's command in its database, as pg_cron would.
func runAsCron(t *testing.T, base string, job cronJob) {
	t.Helper()
	pool := newPool(t, databaseURL(t, base, job.database), nil)
	_, err := pool.Exec(context.Background(), job.command)
	require.NoError(t, err, "pg_cron job %q runs %s", job.name, job.command)
}

// TestMigrateSchemaNamedByReservedWord creates the key store in schemas
// named by reserved words: the purge job's command quotes the schema, so
// that pg_cron can run it, and the purge removes what expired.
func TestMigrateSchemaNamedByReservedWord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cron, base := admin(t)
	for _, schema := range []string{"order", "user"} {
		pgtest.DropSchema(ctx, base, schema)
		t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })
		res, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: schema})
		require.NoError(t, err, schema)
		require.NotNil(t, res.Purge)
		want := `CALL "` + schema + `".purge_expired_idempotency_keys()`
		require.Equal(t, want, res.Purge.Command)

		_, err = cron.Exec(ctx, `INSERT INTO "`+schema+`".idempotency_keys (key, user_id, request_hash, status, response_body, status_code, owner, created_at, expires_at)
			VALUES (gen_random_uuid()::text, gen_random_uuid(), 'h', 'completed', '{"status":201,"body":""}', 201, 'o', now() - interval '2 days', now() - interval '1 day')`)
		require.NoError(t, err)
		jobs := jobsFor(t, cron, res.Purge.Database, `"`+schema+`"`)
		require.Len(t, jobs, 1, "one job purges schema %s", schema)
		require.Equal(t, res.Purge.Name, jobs[0].name)
		runAsCron(t, base, jobs[0])
		var left int
		require.NoError(t, cron.QueryRow(ctx, `SELECT count(*) FROM "`+schema+`".idempotency_keys`).Scan(&left))
		require.Zero(t, left, "the job purged the expired record")

		require.NoError(t, pgstore.Uninstall(ctx, cron, &pgstore.MigrateOptions{Schema: schema}))
		require.Empty(t, jobsFor(t, cron, res.Purge.Database, `"`+schema+`"`), "Uninstall removes the job")
	}
}

// TestPurgeJobNamesAreDistinct: key stores that the earlier names mixed
// up (the public schema of database D and schema D of the cron database;
// two long schema names with the first 45 bytes in common) each get a job
// of their own, which runs.
func TestPurgeJobNamesAreDistinct(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cron, base := admin(t)
	cronDB := cron.Config().ConnConfig.Database

	d := fmt.Sprintf("keys_%d", time.Now().UnixNano()%1_000_000_000)
	_, err := cron.Exec(ctx, `CREATE DATABASE `+d)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cron.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE database = $1`, d)
		_, _ = cron.Exec(ctx, `DROP DATABASE IF EXISTS `+d+` WITH (FORCE)`)
	})
	long := strings.Repeat("k", 45) + "_" + d[len(d)-6:]
	schemas := []string{d, long + strings.Repeat("a", 63-len(long)), long + strings.Repeat("b", 63-len(long))}
	for _, s := range schemas {
		t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, s) })
	}

	other := newPool(t, databaseURL(t, base, d), nil)
	inOther, err := pgstore.Migrate(ctx, other, nil)
	require.NoError(t, err)
	require.Equal(t, d, inOther.Purge.Database)
	results := []*pgstore.MigrateResult{inOther}
	for _, s := range schemas {
		res, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: s})
		require.NoError(t, err, s)
		require.Equal(t, cronDB, res.Purge.Database)
		results = append(results, res)
	}

	names := map[string]bool{}
	for _, res := range results {
		require.LessOrEqual(t, len(res.Purge.Name), 63, "a job name pg_cron keeps whole")
		names[res.Purge.Name] = true
		quoted := strings.TrimSuffix(strings.TrimPrefix(res.Purge.Command, "CALL "), ".purge_expired_idempotency_keys()")
		jobs := jobsFor(t, cron, res.Purge.Database, quoted)
		require.Len(t, jobs, 1, "schema %s of database %s has its job", res.Schema, res.Purge.Database)
		require.Equal(t, res.Purge.Name, jobs[0].name)
		runAsCron(t, base, jobs[0])
	}
	require.Len(t, names, len(results), "every key store has a job name of its own: %v", names)

	// Migrating again keeps one job each.
	for _, s := range schemas {
		_, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: s})
		require.NoError(t, err)
	}
	var n int
	require.NoError(t, cron.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE database = $1 AND command LIKE '%purge_expired_idempotency_keys()'`, d).Scan(&n))
	require.Equal(t, 1, n)
}

// TestMigrateRefusesTooLongSchemaName: PostgreSQL keeps names of at most
// 63 bytes and cuts longer ones. Migrate refuses a longer schema name
// before creating anything, with an error that names the limit and the
// name PostgreSQL would use; a name of 63 bytes migrates again and again.
func TestMigrateRefusesTooLongSchemaName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cron, base := admin(t)
	stem := "long_" + fmt.Sprint(time.Now().UnixNano()%1_000_000_000) + "_"
	exact := stem + strings.Repeat("x", 63-len(stem))
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, exact) })

	for _, name := range []string{exact + "y", exact[:62] + "é"} {
		_, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: name, Cron: pgstore.CronOff})
		require.Error(t, err, "%d bytes", len(name))
		require.ErrorContains(t, err, "63 bytes")
		var exists bool
		require.NoError(t, cron.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname LIKE $1 || '%')`, stem).Scan(&exists))
		require.False(t, exists, "nothing is created")
		require.ErrorContains(t, pgstore.Uninstall(ctx, cron, &pgstore.MigrateOptions{Schema: name}), "63 bytes")
	}
	for range 2 {
		_, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: exact, Cron: pgstore.CronOff})
		require.NoError(t, err)
	}
	_, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: "nul\x00byte", Cron: pgstore.CronOff})
	require.ErrorContains(t, err, "NUL")
}

// TestMigrateReplacesJobOfEarlierName: a key store scheduled by an earlier
// build has its purge job under the earlier name; Migrate replaces it by
// the job of the current name, and Uninstall removes a job of either name.
func TestMigrateReplacesJobOfEarlierName(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cron, base := admin(t)
	schema := fmt.Sprintf("earlier_%d", time.Now().UnixNano()%1_000_000_000)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, schema) })
	command := "CALL " + schema + ".purge_expired_idempotency_keys()"
	schedule := func() {
		t.Helper()
		_, err := cron.Exec(ctx, `SELECT cron.schedule($1, '0 * * * *', $2)`, "purge-idempotency-"+schema, command)
		require.NoError(t, err)
	}
	schedule()

	res, err := pgstore.Migrate(ctx, cron, &pgstore.MigrateOptions{Schema: schema})
	require.NoError(t, err)
	jobs := jobsFor(t, cron, res.Purge.Database, schema)
	require.Equal(t, []cronJob{{res.Purge.Name, command, res.Purge.Database}}, jobs, "one job, of the current name")

	schedule()
	require.Len(t, jobsFor(t, cron, res.Purge.Database, schema), 2)
	require.NoError(t, pgstore.Uninstall(ctx, cron, &pgstore.MigrateOptions{Schema: schema}))
	require.Empty(t, jobsFor(t, cron, res.Purge.Database, schema))
}
