package dbsetup_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

var cfg = dbsetup.Config{Database: "ichido", MasterUser: "ichido_admin", MigrateUser: "ichido_migrate", AppUser: "ichido_app", CheckUser: "ichido_check"}

// aurora16 starts a PostgreSQL 16 prepared like Aurora (the pg_cron
// stand-in: the npm server has no pg_cron), with the stand-in's jobs run as
// pg_cron's background workers run them.
func aurora16(t *testing.T) *pgtest.Aurora {
	t.Helper()
	ctx := context.Background()
	bin, env, err := pgtest.InstallPG16(ctx)
	require.NoError(t, err)
	a, err := pgtest.StartAurora(ctx, pgtest.AuroraOptions{
		Options:  pgtest.Options{Dir: filepath.Join(t.TempDir(), "pg16"), Bin: bin, Env: env},
		FakeCron: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	runner := pgtest.StartFakeCron(a, pgtest.FakeCronOptions{})
	t.Cleanup(runner.Stop)
	return a
}

func connector(t *testing.T, c *pgtest.Cluster) dbsetup.Connect {
	return func(ctx context.Context, user string) (*pgxpool.Pool, error) {
		return pgxpool.New(ctx, c.URLAs(user))
	}
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

// TestApplyOnAuroraLike16 runs the setup twice on a PostgreSQL 16 prepared
// like Aurora and checks the privilege rule: the app user may read and
// write every data table and call every key-store function, and nothing
// else; the migrate user owns everything; the app user owns nothing.
func TestApplyOnAuroraLike16(t *testing.T) {
	ctx := context.Background()
	a := aurora16(t)
	sum, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Contains(t, sum.Server, "16.")
	require.ElementsMatch(t, []string{"ichido_migrate", "ichido_app", "ichido_check"}, sum.Created)
	require.NotEmpty(t, sum.Applied)
	t.Logf("server %s: applied %d migrations, granted on %v", sum.Server, len(sum.Applied), sum.Granted)

	again, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err, "the setup runs on every deploy")
	require.Empty(t, again.Created)
	require.Empty(t, again.Applied)
	require.Equal(t, sum.Granted, again.Granted)

	super := pool(t, a.URL(""))
	checkRule(t, super, "public", cfg)
}

// checkRule checks the privilege rule of docs/adr/0096 in schema.
func checkRule(t *testing.T, super *pgxpool.Pool, schema string, cfg dbsetup.Config) {
	t.Helper()
	ctx := context.Background()
	type row struct {
		Kind, Name string
		Owner      string
		Privs      string
	}
	rows, err := super.Query(ctx, `
		SELECT CASE c.relkind WHEN 'S' THEN 'sequence' ELSE 'table' END, c.relname, pg_get_userbyid(c.relowner),
		       concat_ws(',',
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'SELECT') THEN 'SELECT' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'INSERT') THEN 'INSERT' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'UPDATE') THEN 'UPDATE' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'DELETE') THEN 'DELETE' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'TRUNCATE') THEN 'TRUNCATE' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'REFERENCES') THEN 'REFERENCES' END,
		         CASE WHEN c.relkind <> 'S' AND has_table_privilege($2, c.oid, 'TRIGGER') THEN 'TRIGGER' END,
		         CASE WHEN c.relkind = 'S' AND has_sequence_privilege($2, c.oid, 'USAGE') THEN 'USAGE' END)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'p', 'S', 'v', 'm')
		UNION ALL
		SELECT CASE p.prokind WHEN 'p' THEN 'procedure' ELSE 'function' END, p.proname, pg_get_userbyid(p.proowner),
		       CASE WHEN has_function_privilege($2, p.oid, 'EXECUTE') THEN 'EXECUTE' ELSE '' END
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		ORDER BY 1, 2`, schema, cfg.AppUser)
	require.NoError(t, err)
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.Kind, &r.Name, &r.Owner, &r.Privs))
		got = append(got, r)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, got)
	dml := "SELECT,INSERT,UPDATE,DELETE"
	for _, r := range got {
		require.Equal(t, cfg.MigrateUser, r.Owner, "%s %s: the migrate user owns every object", r.Kind, r.Name)
		want := map[string]string{"table": dml, "sequence": "USAGE", "function": "EXECUTE", "procedure": ""}[r.Kind]
		switch r.Name {
		case "goose_db_version", "idempotency_store_version", "goose_db_version_id_seq", dbsetup.PurgeHealthFunction:
			want = ""
		}
		require.Equal(t, want, r.Privs, "%s %s: the app user's privileges", r.Kind, r.Name)
	}
	var superuser, createrole, createdb bool
	require.NoError(t, super.QueryRow(ctx, `SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = $1`, cfg.AppUser).Scan(&superuser, &createrole, &createdb))
	require.False(t, superuser || createrole || createdb)
	var schemaCreate bool
	require.NoError(t, super.QueryRow(ctx, `SELECT has_schema_privilege($1, $2, 'CREATE')`, cfg.AppUser, schema).Scan(&schemaCreate))
	require.False(t, schemaCreate, "the app user may not create objects")
	owned, err := dbsetup.Owned(ctx, super, cfg.AppUser)
	require.NoError(t, err)
	require.Empty(t, owned, "the app user owns nothing")
}

// TestGrantFollowsNewTables: a table a later migration creates is granted
// by the rule on the next setup, with no list to update; until then the app
// user cannot touch it.
func TestGrantFollowsNewTables(t *testing.T) {
	ctx := context.Background()
	a := aurora16(t)
	_, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	owner := pool(t, a.URLAs(cfg.MigrateUser))
	_, err = owner.Exec(ctx, `CREATE TABLE later (id int PRIMARY KEY); CREATE FUNCTION later_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM later'`)
	require.NoError(t, err)
	app := pool(t, a.URLAs(cfg.AppUser))
	_, err = app.Exec(ctx, `INSERT INTO later VALUES (1)`)
	require.ErrorContains(t, err, "permission denied", "before the setup runs again")
	_, err = app.Exec(ctx, `SELECT later_count()`)
	require.ErrorContains(t, err, "permission denied", "a new function is not executable by PUBLIC")

	_, err = dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	_, err = app.Exec(ctx, `INSERT INTO later VALUES (1)`)
	require.NoError(t, err)
	var n int64
	require.NoError(t, app.QueryRow(ctx, `SELECT later_count()`).Scan(&n))
	require.Equal(t, int64(1), n)
	_, err = app.Exec(ctx, `TRUNCATE later`)
	require.ErrorContains(t, err, "permission denied")
	_, err = app.Exec(ctx, `DROP TABLE later`)
	require.ErrorContains(t, err, "must be owner")
	checkRule(t, pool(t, a.URL("")), "public", cfg)
}

// TestApplyRefusesBadConfig: names missing or shared fail before any
// connection.
func TestApplyRefusesBadConfig(t *testing.T) {
	t.Parallel()
	never := func(context.Context, string) (*pgxpool.Pool, error) {
		t.Fatal("Apply connected despite a bad configuration")
		return nil, nil
	}
	_, err := dbsetup.Apply(context.Background(), never, dbsetup.Config{Database: "ichido"})
	require.ErrorIs(t, err, dbsetup.ErrConfig)
	same := cfg
	same.AppUser = same.MigrateUser
	_, err = dbsetup.Apply(context.Background(), never, same)
	require.ErrorIs(t, err, dbsetup.ErrConfig)
	noCheck := cfg
	noCheck.CheckUser = ""
	_, err = dbsetup.Apply(context.Background(), never, noCheck)
	require.ErrorIs(t, err, dbsetup.ErrConfig)
	require.ErrorContains(t, err, "CheckUser")
}

// TestApplyTakesOverAnEarlierStack: a database set up by hand as the
// deploy guide used to say (prod: the migrations run as the master user,
// which owns the tables and the purge jobs; the app user has a password)
// is brought to the rule by the setup: the migrate user owns everything and
// schedules the jobs, the master user's jobs are gone, the app user logs in
// with IAM only.
func TestApplyTakesOverAnEarlierStack(t *testing.T) {
	ctx := context.Background()
	a := aurora16(t)
	master := pool(t, a.URLAs(cfg.MasterUser))
	_, err := master.Exec(ctx, `CREATE ROLE `+cfg.AppUser+` LOGIN PASSWORD 'from-the-old-secret'`)
	require.NoError(t, err)
	_, err = migrate.Up(ctx, master)
	require.NoError(t, err)
	super := pool(t, a.URL(""))
	var masterJobs int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE username = $1`, cfg.MasterUser).Scan(&masterJobs))
	require.Positive(t, masterJobs, "the earlier setup scheduled its jobs as the master user")

	sum, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Equal(t, []string{cfg.MigrateUser, cfg.CheckUser}, sum.Created, "the app user existed")
	require.Contains(t, sum.TakenOver, "public.tasks")
	require.Empty(t, sum.Applied, "the migrations were applied already")

	checkRule(t, super, "public", cfg)
	rows, err := super.Query(ctx, `SELECT jobname || ' ' || username FROM cron.job ORDER BY 1`)
	require.NoError(t, err)
	jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, j := range jobs {
		require.True(t, strings.HasSuffix(j, " "+cfg.MigrateUser), "job %s: scheduled by the migrate user only", j)
	}
	require.NotEmpty(t, jobs)
	var noPassword bool
	require.NoError(t, super.QueryRow(ctx, `SELECT rolpassword IS NULL FROM pg_authid WHERE rolname = $1`, cfg.AppUser).Scan(&noPassword))
	require.True(t, noPassword, "the app user's old password is gone")
	var iam bool
	require.NoError(t, super.QueryRow(ctx, `SELECT pg_has_role($1, 'rds_iam', 'MEMBER')`, cfg.AppUser).Scan(&iam))
	require.True(t, iam)
}
