package migrate_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/migrations"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func TestUpDownUp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)

	all := migrationCount(t)
	applied, err := migrate.Up(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, applied, all)
	require.Equal(t, "pgstore/0001_idempotency_keys.sql", applied[0].Name, "the key store first")
	requireTables(t, db, "idempotency_keys", "idempotency_store_version", "task_activity", "task_deletions", "tasks")

	rolledBack, err := migrate.Reset(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, rolledBack, all)
	requireTables(t, db)
	require.Zero(t, countJobs(t, db), "down must unschedule the schema's jobs")

	applied, err = migrate.Up(ctx, db.Pool)
	require.NoError(t, err)
	require.Len(t, applied, all)
	requireTables(t, db, "idempotency_keys", "idempotency_store_version", "task_activity", "task_deletions", "tasks")

	v, err := migrate.Version(ctx, db.Pool)
	require.NoError(t, err)
	require.EqualValues(t, newestAppVersion(t), v)

	again, err := migrate.Up(ctx, db.Pool)
	require.NoError(t, err)
	require.Empty(t, again, "a second Up applies nothing")
}

func TestKeyStoreIsUnloggedAndTasksAreNot(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	rows, err := db.Pool.Query(context.Background(), `
		SELECT c.relname, c.relpersistence::text FROM pg_class c
		JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'i') AND c.relname NOT LIKE 'goose%'`, db.Schema)
	require.NoError(t, err)
	persistence := map[string]string{}
	for rows.Next() {
		var name, p string
		require.NoError(t, rows.Scan(&name, &p))
		persistence[name] = p
	}
	require.NoError(t, rows.Err())
	require.Equal(t, "u", persistence["idempotency_keys"])
	require.Equal(t, "u", persistence["idempotency_keys_expires_at"], "indexes of an UNLOGGED table are unlogged too")
	require.Equal(t, "p", persistence["tasks"], "tasks must survive a crash")
	require.Equal(t, "p", persistence["task_activity"], "activity entries must survive a crash")
	require.Equal(t, "p", persistence["task_deletions"], "what a DELETE deleted must survive a crash")
}

func TestCronJobsRegistered(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	var cronDB string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT current_database()`).Scan(&cronDB))
	rows, err := db.Pool.Query(context.Background(),
		`SELECT jobname, schedule, command FROM cron.job WHERE jobname LIKE '%-' || $1 OR jobname = 'purge-idempotency ' || current_database() || '.' || $1 ORDER BY jobname`, db.Schema)
	require.NoError(t, err)
	type job struct{ name, schedule, command string }
	var jobs []job
	for rows.Next() {
		var j job
		require.NoError(t, rows.Scan(&j.name, &j.schedule, &j.command))
		jobs = append(jobs, j)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []job{
		{"purge-idempotency " + cronDB + "." + db.Schema, "0 * * * *", fmt.Sprintf("CALL %s.purge_expired_idempotency_keys()", db.Schema)},
		{"purge-task-deletions-" + db.Schema, "45 3 * * *", fmt.Sprintf("DELETE FROM %s.task_deletions WHERE deleted_at < now() - interval '7 days'", db.Schema)},
	}, jobs)
	var history string
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT schedule FROM cron.job WHERE jobname = 'purge-cron-history'`).Scan(&history))
	require.Equal(t, "30 3 * * *", history, "one job trims pg_cron's own history")
}

// insertKeys adds n records expiring at the given offset from now.
func insertKeys(t *testing.T, db *pgtest.DB, n int, expiresIn time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
		INSERT INTO idempotency_keys (key, user_id, request_hash, status, response_body, status_code, owner, created_at, expires_at)
		SELECT gen_random_uuid()::text, gen_random_uuid(), 'h', 'completed', '{"status":201,"body":""}', 201, 'o',
		       now() - interval '1 day', now() + $2::interval
		FROM generate_series(1, $1)`, n, fmt.Sprintf("%d milliseconds", expiresIn.Milliseconds()))
	require.NoError(t, err)
}

func count(t *testing.T, db *pgtest.DB, where string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM idempotency_keys WHERE "+where).Scan(&n))
	return n
}

func TestPurgeRemovesExactlyTheExpiredInBatches(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := apptest.New(t)
	insertKeys(t, db, 25, -time.Minute) // expired
	insertKeys(t, db, 7, time.Hour)     // live

	// Two batches of ten at most: the bound holds, and the rest waits for
	// the next run.
	_, err := db.Pool.Exec(ctx, "CALL purge_expired_idempotency_keys(10, 2)")
	require.NoError(t, err)
	require.Equal(t, 5, count(t, db, "expires_at < now()"))
	require.Equal(t, 7, count(t, db, "expires_at >= now()"))

	_, err = db.Pool.Exec(ctx, "CALL purge_expired_idempotency_keys(10, 100)")
	require.NoError(t, err)
	require.Equal(t, 0, count(t, db, "expires_at < now()"))
	require.Equal(t, 7, count(t, db, "true"), "live keys are never purged")
}

// TestPgCronRunsThePurge lets pg_cron itself run a purge in the local
// cluster. pg_cron 1.4 schedules by the minute, so this waits up to ~75 s.
func TestPgCronRunsThePurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := apptest.New(t)
	var same bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT current_database() = current_setting('cron.database_name')`).Scan(&same))
	if !same {
		t.Skip("pg_cron runs its jobs in another database than the one under test")
	}
	insertKeys(t, db, 30, -time.Minute)
	insertKeys(t, db, 3, time.Hour)

	var jobID int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT cron.schedule($1, '* * * * *', $2)`,
		"every-minute-"+db.Schema, fmt.Sprintf("CALL %s.purge_expired_idempotency_keys(7, 100)", db.Schema)).Scan(&jobID))

	deadline := time.Now().Add(80 * time.Second)
	var status string
	for time.Now().Before(deadline) {
		err := db.Pool.QueryRow(ctx, `SELECT status FROM cron.job_run_details WHERE jobid = $1 AND status IN ('succeeded', 'failed') LIMIT 1`, jobID).Scan(&status)
		if err == nil {
			break
		}
		time.Sleep(time.Second)
	}
	require.Equal(t, "succeeded", status, "pg_cron did not run the purge within 80 s")
	require.Equal(t, 0, count(t, db, "expires_at < now()"))
	require.Equal(t, 3, count(t, db, "true"))
}

// TestUpRefusesWithoutPgCron runs the migrations on a server where pg_cron
// is not preloaded: Up must fail with a clear message and apply nothing.
func TestUpRefusesWithoutPgCron(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: filepath.Join(t.TempDir(), "data"), NoCron: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Destroy() })
	pool, err := pgxpool.New(ctx, c.URL(""))
	require.NoError(t, err)
	defer pool.Close()

	_, err = migrate.Up(ctx, pool)
	require.Error(t, err)
	require.True(t, errors.Is(err, migrate.ErrNoPgCron), "got %v", err)
	require.Contains(t, err.Error(), "shared_preload_libraries")

	var tables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables))
	require.Zero(t, tables, "nothing may be applied")
}

// migrationCount is how many migrations Up applies to an empty schema: the
// key store's and the app's.
func migrationCount(t *testing.T) int {
	t.Helper()
	store, err := fs.Glob(pgstore.Migrations(), "*.sql")
	require.NoError(t, err)
	app, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	return len(store) + len(app)
}

// newestAppVersion is the version of the app's newest migration file.
func newestAppVersion(t *testing.T) int64 {
	t.Helper()
	app, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	var newest int64
	for _, name := range app {
		v, err := strconv.ParseInt(strings.SplitN(name, "_", 2)[0], 10, 64)
		require.NoError(t, err)
		newest = max(newest, v)
	}
	return newest
}

func requireTables(t *testing.T, db *pgtest.DB, want ...string) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(),
		`SELECT tablename FROM pg_tables WHERE schemaname = $1 AND tablename NOT LIKE 'goose%' ORDER BY tablename`, db.Schema)
	require.NoError(t, err)
	got := []string{}
	for rows.Next() {
		var name string
		require.NoError(t, rows.Scan(&name))
		got = append(got, name)
	}
	require.NoError(t, rows.Err())
	if want == nil {
		want = []string{}
	}
	require.Equal(t, want, got)
}

func countJobs(t *testing.T, db *pgtest.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM cron.job
		WHERE jobname LIKE '%-' || $1 OR jobname = 'purge-idempotency ' || current_database() || '.' || $1`, db.Schema).Scan(&n))
	return n
}

// secondDatabase creates a database of its own in the shared cluster, which
// is not the one named by cron.database_name, and returns its URL. It is
// dropped at the end of the test, with any job scheduled for it.
func secondDatabase(t *testing.T) (url, name string) {
	t.Helper()
	ctx := context.Background()
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	name = "second_" + strings.ReplaceAll(strings.ToLower(t.Name()), "/", "_")
	name = name[:min(len(name), 40)] + "_" + fmt.Sprint(time.Now().UnixNano()%1_000_000)
	_, err = admin.Exec(ctx, `CREATE DATABASE `+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE database = $1`, name)
		_, _ = admin.Exec(ctx, `DROP DATABASE IF EXISTS `+name+` WITH (FORCE)`)
	})
	var cronDB string
	require.NoError(t, admin.QueryRow(ctx, `SELECT current_setting('cron.database_name')`).Scan(&cronDB))
	require.NotEqual(t, cronDB, name)
	u, err := withURL(base, name, "")
	require.NoError(t, err)
	return u, name
}

// TestUpInSecondDatabase works in a database other than the cron
// database, as a user who may schedule there. The app's own migrations
// schedule pg_cron jobs themselves, so Up refuses before applying anything
// and says what to do; the key store alone (pgstore.Migrate) is created and
// its purge scheduled from the cron database to run in this one
// (cron.schedule_in_database).
func TestUpInSecondDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, name := secondDatabase(t)
	pool, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	defer pool.Close()

	_, err = migrate.Up(ctx, pool)
	require.ErrorIs(t, err, migrate.ErrCronElsewhere)
	require.ErrorContains(t, err, "cron.database_name")
	require.ErrorContains(t, err, "pgstore.Migrate")
	// The caller is a superuser: the refusal names the wrong database and
	// the two ways out, and blames no permission.
	require.NotContains(t, err.Error(), "this user cannot")
	require.ErrorContains(t, err, "point DATABASE_URL at it")
	require.ErrorContains(t, err, "restart the server")
	var tables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables))
	require.Zero(t, tables, "nothing may be applied")

	res, err := pgstore.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Len(t, res.Applied, len(must(fs.Glob(pgstore.Migrations(), "*.sql"))))

	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	defer admin.Close()
	var command, database string
	require.NoError(t, admin.QueryRow(ctx, `SELECT command, database FROM cron.job WHERE jobname = $1`, "purge-idempotency "+name+".public").Scan(&command, &database))
	require.Equal(t, name, database, "the job runs in the second database")
	require.Equal(t, "CALL public.purge_expired_idempotency_keys()", command)

	_, err = pool.Exec(ctx, `CALL purge_expired_idempotency_keys()`)
	require.NoError(t, err)
	again, err := pgstore.Migrate(ctx, pool, nil)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestUpInSecondDatabaseWithoutCronRights: a user who owns the second
// database but may not schedule jobs in the cron database gets an error
// that names cron.database_name and both ways out, before anything is
// applied.
func TestUpInSecondDatabaseWithoutCronRights(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	u, name := secondDatabase(t)
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	defer admin.Close()
	role := name + "_owner"
	_, err = admin.Exec(ctx, `CREATE ROLE `+role+` LOGIN`)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = admin.Exec(context.Background(), `DROP OWNED BY `+role)
		_, _ = admin.Exec(context.Background(), `DROP ROLE IF EXISTS `+role)
	})
	_, err = admin.Exec(ctx, `ALTER DATABASE `+name+` OWNER TO `+role)
	require.NoError(t, err)
	su, err := pgxpool.New(ctx, u)
	require.NoError(t, err)
	_, err = su.Exec(ctx, `ALTER SCHEMA public OWNER TO `+role)
	su.Close()
	require.NoError(t, err)

	ru, err := withURL(u, "", role)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, ru)
	require.NoError(t, err)
	defer pool.Close()

	_, err = migrate.Up(ctx, pool)
	require.ErrorIs(t, err, migrate.ErrCronElsewhere)
	for _, want := range []string{"cron.database_name", "cron.schedule_in_database", "CronOff", "purge_expired_idempotency_keys"} {
		require.Contains(t, err.Error(), want)
	}
	var tables int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&tables))
	require.Zero(t, tables, "nothing may be applied")

	// The way out without pg_cron: the key store alone, purged by the
	// user's own scheduler.
	res, err := pgstore.Migrate(ctx, pool, &pgstore.MigrateOptions{Cron: pgstore.CronOff})
	require.NoError(t, err)
	require.Nil(t, res.Purge)
	_, err = pool.Exec(ctx, `CALL purge_expired_idempotency_keys()`)
	require.NoError(t, err)
}

// withURL returns rawURL with another database and/or user.
func withURL(rawURL, database, user string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", err
	}
	if database != "" {
		u.Path = "/" + database
	}
	if user != "" {
		u.User = url.User(user)
	}
	return u.String(), nil
}
