package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// cronOutsider is a database of the shared cluster that is not the cron
// database, and a user that is neither a superuser nor an owner of
// anything there, allowed only to create schemas in it (what Migrate needs
// of the key store's database).
type cronOutsider struct {
	cron   *pgxpool.Pool // the cron database, as its superuser
	base   string        // its URL
	cronDB string
	db     string
	role   string
	pool   *pgxpool.Pool // db, as role
}

func newCronOutsider(t *testing.T) *cronOutsider {
	t.Helper()
	ctx := context.Background()
	cron, base := admin(t)
	o := &cronOutsider{cron: cron, base: base, cronDB: cron.Config().ConnConfig.Database}
	n := time.Now().UnixNano() % 1_000_000_000
	o.db = fmt.Sprintf("outside_cron_%d", n)
	o.role = fmt.Sprintf("migrator_%d", n)
	for _, s := range []string{
		`CREATE DATABASE ` + o.db,
		`CREATE ROLE ` + o.role + ` LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE`,
		`GRANT CREATE ON DATABASE ` + o.db + ` TO ` + o.role,
	} {
		_, err := cron.Exec(ctx, s)
		require.NoError(t, err, s)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = cron.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE database = $1 OR username = $2`, o.db, o.role)
		_, _ = cron.Exec(ctx, `DROP DATABASE IF EXISTS `+o.db+` WITH (FORCE)`)
		cronACLs.Lock()
		_, _ = cron.Exec(ctx, `DROP OWNED BY `+o.role)
		cronACLs.Unlock()
		_, _ = cron.Exec(ctx, `DROP ROLE IF EXISTS `+o.role)
	})
	u := databaseURL(t, base, o.db)
	cfg, err := pgxpool.ParseConfig(u)
	require.NoError(t, err)
	cfg.ConnConfig.User = o.role
	o.pool, err = pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(o.pool.Close)
	require.NotEqual(t, o.cronDB, o.db)
	return o
}

// cronACLs serialises the tests' changes to the privileges of the cron
// schema and its objects: two GRANTs on one object at once can fail with
// "tuple concurrently updated".
var cronACLs sync.Mutex

// grant runs statements in the cron database as its superuser.
func (o *cronOutsider) grant(t *testing.T, stmts ...string) {
	t.Helper()
	cronACLs.Lock()
	defer cronACLs.Unlock()
	for _, s := range stmts {
		_, err := o.cron.Exec(context.Background(), s)
		require.NoError(t, err, s)
	}
}

// TestCronGrantsScheduleFromAnotherDatabase: a user that is no superuser
// and owns nothing in the cron database creates the key store in another
// database of the server, and its purge is scheduled there, once it has
// exactly CronGrants' statements; USAGE on schema cron alone (with
// cron.database_name readable) does not let it call
// cron.schedule_in_database, and Migrate refuses before applying anything.
func TestCronGrantsScheduleFromAnotherDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newCronOutsider(t)
	opts := &pgstore.MigrateOptions{Schema: "idempotency"}

	// USAGE on schema cron alone: pg_cron refuses the call itself.
	o.grant(t, "GRANT pg_read_all_settings TO "+o.role, "GRANT USAGE ON SCHEMA cron TO "+o.role)
	asRole := newPool(t, o.base, func(c *pgxpool.Config) { c.ConnConfig.User = o.role })
	_, err := asRole.Exec(ctx, `SELECT cron.schedule_in_database('probe', '0 * * * *', 'SELECT 1', $1::text)`, o.db)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "USAGE on schema cron alone may not schedule in another database: %v", err)
	require.Equal(t, pgerrcode.InsufficientPrivilege, pgErr.Code, pgErr.Message)
	_, err = pgstore.Migrate(ctx, o.pool, opts)
	require.ErrorIs(t, err, pgstore.ErrCronElsewhere)
	var schemas int
	require.NoError(t, o.pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = 'idempotency'`).Scan(&schemas))
	require.Zero(t, schemas, "nothing is applied")

	// CronGrants' statements, and nothing else.
	o.grant(t, pgstore.CronGrants(o.role)...)
	res, err := pgstore.Migrate(ctx, o.pool, opts)
	require.NoError(t, err)
	require.NotNil(t, res.Purge)
	require.Equal(t, o.db, res.Purge.Database)
	require.Equal(t, o.cronDB, res.Purge.CronDatabase)
	var command, database, username string
	require.NoError(t, o.cron.QueryRow(ctx, `SELECT command, database, username FROM cron.job WHERE jobname = $1`, res.Purge.Name).
		Scan(&command, &database, &username))
	require.Equal(t, "CALL idempotency.purge_expired_idempotency_keys()", command)
	require.Equal(t, o.db, database, "the job runs in the key store's database")
	require.Equal(t, o.role, username, "the job runs as the user that ran Migrate")
	_, err = o.pool.Exec(ctx, command)
	require.NoError(t, err, "the user may run what its job runs")

	again, err := pgstore.Migrate(ctx, o.pool, opts)
	require.NoError(t, err)
	require.Empty(t, again.Applied)
	var jobs int
	require.NoError(t, o.cron.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE database = $1`, o.db).Scan(&jobs))
	require.Equal(t, 1, jobs, "the job is updated in place")
}

// TestCronElsewhereNamesTheGrants: without the grants, Migrate's
// ErrCronElsewhere gives CronGrants' statements for this very user and the
// database they run in (when the user may read its name), whichever of
// them is missing, and says that USAGE on schema cron alone does not do.
func TestCronElsewhereNamesTheGrants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := newCronOutsider(t)
	check := func(what, where string) {
		t.Helper()
		_, err := pgstore.Migrate(ctx, o.pool, &pgstore.MigrateOptions{Schema: "idempotency"})
		require.ErrorIs(t, err, pgstore.ErrCronElsewhere, what)
		for _, stmt := range pgstore.CronGrants(o.role) {
			require.Contains(t, err.Error(), stmt+";", "%s: the error gives the statement", what)
		}
		require.Contains(t, err.Error(), where, what)
		require.Contains(t, err.Error(), "USAGE on schema cron alone is not enough", what)
		require.Contains(t, err.Error(), "CronOff", what)
	}
	check("nothing granted: cron.database_name unreadable", "in the database named by cron.database_name")
	o.grant(t, "GRANT pg_read_all_settings TO "+o.role)
	inCronDB := fmt.Sprintf("in database %q", o.cronDB)
	check("cron.database_name readable, no USAGE on schema cron", inCronDB)
	o.grant(t, "GRANT USAGE ON SCHEMA cron TO "+o.role)
	check("USAGE on schema cron, no EXECUTE on cron.schedule_in_database", inCronDB)
}

// The README shows CronGrants' statements for user migrator, exactly.
func TestReadmeShowsTheCronGrants(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	for _, stmt := range pgstore.CronGrants("migrator") {
		require.True(t, strings.Contains(string(readme), stmt+";\n"), "README.md lacks %s;", stmt)
	}
}
