// Package dbsetup prepares the deployed database for the task API, every
// time the stack is deployed: the database users, their privileges, the
// migrations and the pg_cron jobs. The stack's DatabaseSetup custom
// resource runs it through MigrateFunction (docs/adr/0095); `make rehearse`
// runs the same code against a private PostgreSQL prepared as Aurora
// prepares a cluster.
//
// Apply works in three steps, each as the user it needs:
//
//  1. As the master user (on Aurora NOSUPERUSER with CREATEROLE, a member of
//     rds_superuser): create the migrate, the app and the check user when
//     missing, all IAM-only (rds_iam, no password); give the app user
//     idle_session_timeout; grant CONNECT on the database and USAGE (and,
//     for the migrate user, CREATE) on the schema; create pg_cron and let the
//     migrate user schedule jobs; hand objects the master user owns in the
//     schema (left by an earlier version of the stack) to the migrate user.
//  2. As the migrate user: apply the migrations (package migrate), which
//     schedule the pg_cron jobs as that user. It owns every object.
//  3. As the migrate user, the owner: create the purge check's function
//     (PurgeHealthFunction) and let the check user call it, and nothing
//     else; grant the app user privileges by rule (Rule), then check that
//     the app user owns nothing.
//  4. As the migrate user: see pg_cron run a job as that user (ProveCron),
//     the way it runs the purges; a setup that cannot fails, with what to
//     change, rather than leave the purges failing unseen.
//
// A database whose migrations are newer than this code's (the code is an
// older version, as in a rollback) gets none of steps 2 to 4: Apply says
// so in Summary.Ahead and succeeds. Migrations only go forward.
//
// Every statement is idempotent, so Apply may run on every deploy, and it
// works the same whichever way the functions reach the database (RDS Proxy
// or the cluster): the users log in with IAM either way.
package dbsetup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/migrate"
)

// Config names the database objects Apply prepares.
type Config struct {
	// Database is the application database (DB_NAME). Required.
	Database string
	// MasterUser is the user of step 1 (the cluster's master user).
	// Required.
	MasterUser string
	// MigrateUser owns the schema's objects and runs the migrations.
	// Required.
	MigrateUser string
	// AppUser is the user the task functions connect as. Required.
	AppUser string
	// CheckUser is the user the purge check connects as (PurgeCheck). It
	// may call PurgeHealthFunction and do nothing else. Required.
	CheckUser string
	// Schema holds the application's objects. Defaults to "public".
	Schema string
	// AppIdleSessionTimeout is the app user's idle_session_timeout: the
	// server closes a session of the app user idle for longer, so that
	// connections held by frozen Lambda environments do not keep a pausing
	// cluster (dev) awake. Behind RDS Proxy (prod) it is kept for the
	// sessions the proxy pins to a server connection: a frozen
	// environment's pinned session would otherwise hold that connection
	// until the proxy's idle client timeout (30 minutes); the cost is a new
	// proxy-to-server login after an idle minute. Defaults to 60 seconds;
	// at least one second.
	AppIdleSessionTimeout time.Duration
	// Cron are the settings of step 4. Nil means all defaults.
	Cron *CronConfig
}

// CronConfig configures how the setup sees pg_cron run the migrate user's
// jobs (step 4).
type CronConfig struct {
	// EvidenceAge is how recent a successful run of one of the migrate
	// user's jobs (a purge, an earlier probe) must be to prove that pg_cron
	// runs them, with no failed run after it; with none, the setup
	// schedules a probe and waits for it. Defaults to 24 hours.
	EvidenceAge time.Duration
	// ProbeTimeout bounds the wait for the probe's run. pg_cron 1.4 runs a
	// job at the start of a minute, and may take up to the next one to see
	// a new job: two minutes and a margin. It must leave the setup time
	// within the function's timeout. Defaults to 150 seconds.
	ProbeTimeout time.Duration
}

// Connect opens a pool on the application database as user. Apply closes
// the pools it opens.
type Connect func(ctx context.Context, user string) (*pgxpool.Pool, error)

// Summary says what Apply did.
type Summary struct {
	// Server is the server's version (server_version).
	Server string `json:"server"`
	// Created lists the users Apply created (none when they existed).
	Created []string `json:"created"`
	// Applied lists the migrations applied (none when up to date).
	Applied []string `json:"applied"`
	// Version is the newest applied migration of the app's own set.
	Version int64 `json:"version"`
	// Granted lists the objects the app user was granted privileges on.
	Granted []string `json:"granted"`
	// TakenOver lists objects the master user owned and the migrate user
	// now owns.
	TakenOver []string `json:"takenOver,omitempty"`
	// Ahead is set when the database's migrations are newer than this
	// code's, and says which: Apply then migrated, granted and probed
	// nothing.
	Ahead string `json:"ahead,omitempty"`
	// Cron says how step 4 saw pg_cron run the migrate user's jobs.
	Cron *CronProof `json:"cron,omitempty"`
}

// ErrConfig is returned when Config misses a name.
var ErrConfig = errors.New("dbsetup: invalid configuration")

func (c *Config) check() error {
	if c.Schema == "" {
		c.Schema = "public"
	}
	if c.AppIdleSessionTimeout == 0 {
		c.AppIdleSessionTimeout = 60 * time.Second
	}
	cron := CronConfig{}
	if c.Cron != nil {
		cron = *c.Cron
	}
	if cron.EvidenceAge == 0 {
		cron.EvidenceAge = 24 * time.Hour
	}
	if cron.ProbeTimeout == 0 {
		cron.ProbeTimeout = 150 * time.Second
	}
	c.Cron = &cron
	var missing []string
	for name, v := range map[string]string{"Database": c.Database, "MasterUser": c.MasterUser, "MigrateUser": c.MigrateUser, "AppUser": c.AppUser, "CheckUser": c.CheckUser} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not set", ErrConfig, strings.Join(missing, ", "))
	}
	if cron.EvidenceAge < 0 || cron.ProbeTimeout < 0 {
		return fmt.Errorf("%w: Cron.EvidenceAge and Cron.ProbeTimeout may not be negative", ErrConfig)
	}
	if c.AppIdleSessionTimeout < time.Second {
		return fmt.Errorf("%w: AppIdleSessionTimeout is %v, below one second", ErrConfig, c.AppIdleSessionTimeout)
	}
	users := map[string]bool{c.MasterUser: true, c.MigrateUser: true, c.AppUser: true, c.CheckUser: true}
	if len(users) != 4 {
		return fmt.Errorf("%w: the master, migrate, app and check users must be four different users (%s, %s, %s, %s)", ErrConfig, c.MasterUser, c.MigrateUser, c.AppUser, c.CheckUser)
	}
	return nil
}

// Apply prepares the database as the package documentation says. It stops
// at the first failure and says which step failed; what was done before
// stays (every step is safe to run again).
func Apply(ctx context.Context, connect Connect, cfg Config) (Summary, error) {
	var sum Summary
	if err := cfg.check(); err != nil {
		return sum, err
	}
	master, err := connect(ctx, cfg.MasterUser)
	if err != nil {
		return sum, fmt.Errorf("dbsetup: connecting as the master user %s: %w", cfg.MasterUser, err)
	}
	err = asMaster(ctx, master, cfg, &sum)
	master.Close()
	if err != nil {
		return sum, err
	}

	owner, err := connect(ctx, cfg.MigrateUser)
	if err != nil {
		return sum, fmt.Errorf("dbsetup: connecting as the migrate user %s: %w", cfg.MigrateUser, err)
	}
	defer owner.Close()
	if err := setSearchPath(ctx, owner, cfg.Schema); err != nil {
		return sum, err
	}
	if sum.Ahead, err = ahead(ctx, owner); err != nil || sum.Ahead != "" {
		if err == nil {
			sum.Version, err = migrate.Version(ctx, owner)
		}
		return sum, err
	}
	applied, err := migrate.Up(ctx, owner)
	for _, r := range applied {
		sum.Applied = append(sum.Applied, r.Name)
	}
	if err != nil {
		return sum, fmt.Errorf("dbsetup: applying the migrations as %s: %w", cfg.MigrateUser, err)
	}
	if sum.Version, err = migrate.Version(ctx, owner); err != nil {
		return sum, fmt.Errorf("dbsetup: reading the migration version: %w", err)
	}
	if err := InstallPurgeHealth(ctx, owner, cfg.Schema, cfg.CheckUser); err != nil {
		return sum, err
	}
	if sum.Granted, err = GrantApp(ctx, owner, cfg.Schema, cfg.AppUser); err != nil {
		return sum, err
	}
	if owned, err := Owned(ctx, owner, cfg.AppUser); err != nil {
		return sum, err
	} else if len(owned) > 0 {
		return sum, fmt.Errorf("dbsetup: the app user %s owns %s; it must own nothing (ALTER … OWNER TO %s)", cfg.AppUser, strings.Join(owned, ", "), cfg.MigrateUser)
	}
	proof, err := ProveCron(ctx, owner, cfg.Cron.EvidenceAge, cfg.Cron.ProbeTimeout)
	if err != nil {
		return sum, err
	}
	sum.Cron = &proof
	return sum, nil
}

// setSearchPath makes every connection of the pool work in schema. The
// pool's connections are its own, so a session setting would do; the
// setting is made per connection as each is acquired for the migrations.
func setSearchPath(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	var cur *string
	if err := pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
		return fmt.Errorf("dbsetup: %w", err)
	}
	if cur != nil && *cur == schema {
		return nil
	}
	return fmt.Errorf("dbsetup: the migrate user's connection works in schema %v, not %q: set search_path (the connection URL's search_path, or ALTER ROLE … SET search_path)", deref(cur), schema)
}

func deref(s *string) string {
	if s == nil {
		return "(none)"
	}
	return *s
}

// asMaster is step 1.
func asMaster(ctx context.Context, pool *pgxpool.Pool, cfg Config, sum *Summary) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("dbsetup: %w", err)
	}
	defer conn.Release()
	c := conn.Conn()
	var versionNum int
	if err := c.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('server_version_num')::int`).Scan(&sum.Server, &versionNum); err != nil {
		return fmt.Errorf("dbsetup: %w", err)
	}
	var here string
	if err := c.QueryRow(ctx, `SELECT current_database()`).Scan(&here); err != nil {
		return fmt.Errorf("dbsetup: %w", err)
	}
	if here != cfg.Database {
		return fmt.Errorf("dbsetup: connected to database %q, expected %q", here, cfg.Database)
	}
	db, schema := ident(cfg.Database), ident(cfg.Schema)
	master, mig, app, check := ident(cfg.MasterUser), ident(cfg.MigrateUser), ident(cfg.AppUser), ident(cfg.CheckUser)

	for _, u := range []string{cfg.MigrateUser, cfg.AppUser, cfg.CheckUser} {
		var exists bool
		if err := c.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1::text)`, u).Scan(&exists); err != nil {
			return fmt.Errorf("dbsetup: %w", err)
		}
		if !exists {
			if _, err := c.Exec(ctx, `CREATE ROLE `+ident(u)+` LOGIN`); err != nil {
				return step("creating user "+u, err)
			}
			sum.Created = append(sum.Created, u)
		}
	}
	var steps []struct{ what, sql string }
	add := func(what, sql string) { steps = append(steps, struct{ what, sql string }{what, sql}) }
	// IAM only: no password (an earlier version of the stack set one for the
	// app user), rds_iam. None may create roles or databases.
	for _, u := range []string{mig, app, check} {
		add("making "+u+" an IAM user", `ALTER ROLE `+u+` LOGIN NOCREATEDB NOCREATEROLE PASSWORD NULL`)
		add("granting rds_iam to "+u, `GRANT rds_iam TO `+u)
	}
	add("bounding the app user's idle sessions", fmt.Sprintf(`ALTER ROLE %s IN DATABASE %s SET idle_session_timeout = '%dms'`, app, db, cfg.AppIdleSessionTimeout.Milliseconds()))
	// The master user may act as the migrate user (to hand objects over, and
	// for an operator's maintenance), without inheriting its privileges.
	// PostgreSQL 16 makes a role's creator a member of it WITH ADMIN OPTION,
	// INHERIT FALSE, SET FALSE (unless createrole_self_grant says otherwise):
	// it may grant the role, but not act as it until granted SET, as here
	// (the creator may grant itself a role it administers). 15 and earlier
	// give the creator no membership and have no SET/INHERIT options: a
	// CREATEROLE user may grant any role but a superuser's, and the member
	// inherits.
	if versionNum >= 160000 {
		add("letting "+master+" act as "+mig, `GRANT `+mig+` TO `+master+` WITH INHERIT FALSE, SET TRUE`)
	} else {
		add("letting "+master+" act as "+mig, `GRANT `+mig+` TO `+master)
	}
	add("granting CONNECT", `GRANT CONNECT ON DATABASE `+db+` TO `+mig+`, `+app+`, `+check)
	add("granting the schema", `GRANT USAGE, CREATE ON SCHEMA `+schema+` TO `+mig)
	// USAGE lets the check user name the schema's objects; it gets a
	// privilege on one of them only (InstallPurgeHealth).
	add("granting the schema", `GRANT USAGE ON SCHEMA `+schema+` TO `+app+`, `+check)
	add("revoking CREATE on the schema from PUBLIC", `REVOKE CREATE ON SCHEMA `+schema+` FROM PUBLIC`)
	// pg_cron: created by a member of rds_superuser (the master user); the
	// migrate user schedules its own jobs.
	add("creating pg_cron", `CREATE EXTENSION IF NOT EXISTS pg_cron`)
	add("letting "+mig+" schedule pg_cron jobs", `GRANT USAGE ON SCHEMA cron TO `+mig)
	for _, s := range steps {
		if _, err := c.Exec(ctx, s.sql); err != nil {
			return step(s.what, err)
		}
	}
	// Jobs an earlier version scheduled as the master user: the migrations
	// schedule them again as the migrate user.
	if _, err := c.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE username = current_user AND jobname LIKE 'purge-%'`); err != nil {
		return step("unscheduling the master user's purge jobs", err)
	}
	taken, err := takeOver(ctx, c, cfg.Schema, cfg.MigrateUser)
	sum.TakenOver = taken
	return err
}

// takeOver hands the schema's objects that the connection's user owns to
// owner.
func takeOver(ctx context.Context, c *pgx.Conn, schema, owner string) ([]string, error) {
	rows, err := c.Query(ctx, `
		SELECT CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END,
		       format('%I.%I', n.nspname, c.relname)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1::text AND c.relowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
		  AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
		  -- a sequence owned by a column moves with its table
		  AND NOT (c.relkind = 'S' AND EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = c.oid AND d.deptype IN ('a', 'i')))
		UNION ALL
		SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, p.oid::regprocedure::text
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1::text AND p.proowner = (SELECT oid FROM pg_roles WHERE rolname = current_user)
		  AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
		ORDER BY 1, 2`, schema)
	if err != nil {
		return nil, step("listing the master user's objects", err)
	}
	type object struct{ kind, name string }
	objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (object, error) {
		var o object
		return o, r.Scan(&o.kind, &o.name)
	})
	if err != nil {
		return nil, step("listing the master user's objects", err)
	}
	var out []string
	for _, o := range objs {
		if _, err := c.Exec(ctx, `ALTER `+o.kind+` `+o.name+` OWNER TO `+ident(owner)); err != nil {
			return out, step("handing "+o.name+" to "+owner, err)
		}
		out = append(out, o.name)
	}
	return out, nil
}

// bookkeeping are the migration tools' own tables: the app user gets
// nothing on them.
var bookkeeping = []string{"goose_db_version", "idempotency_store_version"}

// Rule is the privilege rule GrantApp applies in a schema (docs/adr/0096):
//
//   - every table except the migration tools' own (goose_db_version,
//     idempotency_store_version): SELECT, INSERT, UPDATE, DELETE, and nothing
//     else (no TRUNCATE, REFERENCES or TRIGGER);
//   - every sequence: USAGE, SELECT;
//   - every function (prokind f): EXECUTE, but the purge check's
//     (PurgeHealthFunction); procedures (the purges pg_cron runs as the
//     owner): nothing;
//   - no routine is executable by PUBLIC;
//   - the migration tools' tables: nothing.
const Rule = "DML on data tables, USAGE on sequences, EXECUTE on functions but the purge check's, nothing on procedures or the migration tools' tables"

// GrantApp applies Rule to every object of schema, as their owner, and
// returns the objects granted on. It also makes later routines of the
// connection's user unexecutable by PUBLIC until granted.
func GrantApp(ctx context.Context, pool *pgxpool.Pool, schema, app string) ([]string, error) {
	s, a := ident(schema), ident(app)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("dbsetup: %w", err)
	}
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("dbsetup: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	rows, err := tx.Query(ctx, `
		SELECT 'TABLE', format('%I.%I', n.nspname, c.relname), c.relname = ANY($2::text[]), pg_get_userbyid(c.relowner)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1::text AND c.relkind IN ('r', 'p', 'v', 'm')
		UNION ALL
		SELECT 'SEQUENCE', format('%I.%I', n.nspname, c.relname),
		       EXISTS (SELECT 1 FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid
		               WHERE d.objid = c.oid AND d.deptype IN ('a', 'i') AND t.relname = ANY($2::text[])),
		       pg_get_userbyid(c.relowner)
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1::text AND c.relkind = 'S'
		UNION ALL
		SELECT CASE p.prokind WHEN 'p' THEN 'PROCEDURE' ELSE 'FUNCTION' END, p.oid::regprocedure::text,
		       p.prokind NOT IN ('f') OR p.proname = $3::text, pg_get_userbyid(p.proowner)
		FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
		WHERE n.nspname = $1::text AND NOT EXISTS (SELECT 1 FROM pg_depend d WHERE d.objid = p.oid AND d.deptype = 'e')
		ORDER BY 1, 2`, schema, bookkeeping, PurgeHealthFunction)
	if err != nil {
		return nil, step("listing the schema's objects", err)
	}
	type object struct {
		kind, name string
		none       bool
		owner      string
	}
	objs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (object, error) {
		var o object
		return o, r.Scan(&o.kind, &o.name, &o.none, &o.owner)
	})
	if err != nil {
		return nil, step("listing the schema's objects", err)
	}
	var me string
	if err := tx.QueryRow(ctx, `SELECT current_user`).Scan(&me); err != nil {
		return nil, step("granting", err)
	}
	var strays []string
	for _, o := range objs {
		if o.owner != me {
			strays = append(strays, fmt.Sprintf("%s %s (owned by %s)", strings.ToLower(o.kind), o.name, o.owner))
		}
	}
	if len(strays) > 0 {
		return nil, fmt.Errorf("dbsetup: the migrate user %s must own every object in schema %s, and these are owned by another user: %s (ALTER … OWNER TO %s)",
			me, schema, strings.Join(strays, ", "), me)
	}
	var granted []string
	for _, o := range objs {
		var stmts []string
		switch {
		case o.kind == "TABLE" || o.kind == "SEQUENCE":
			stmts = append(stmts, `REVOKE ALL ON `+o.kind+` `+o.name+` FROM `+a)
			if !o.none {
				privs := "SELECT, INSERT, UPDATE, DELETE"
				if o.kind == "SEQUENCE" {
					privs = "USAGE, SELECT"
				}
				stmts = append(stmts, `GRANT `+privs+` ON `+o.kind+` `+o.name+` TO `+a)
			}
		default:
			stmts = append(stmts, `REVOKE ALL ON `+o.kind+` `+o.name+` FROM PUBLIC, `+a)
			if !o.none {
				stmts = append(stmts, `GRANT EXECUTE ON FUNCTION `+o.name+` TO `+a)
			}
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return nil, step("granting on "+o.name, err)
			}
		}
		if !o.none {
			granted = append(granted, o.name)
		}
	}
	if _, err := tx.Exec(ctx, `ALTER DEFAULT PRIVILEGES IN SCHEMA `+s+` REVOKE EXECUTE ON ROUTINES FROM PUBLIC`); err != nil {
		return nil, step("revoking PUBLIC's default EXECUTE", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, step("granting", err)
	}
	return granted, nil
}

// Owned lists what user owns in the connection's database, as
// "kind name" (none for a user that owns nothing).
func Owned(ctx context.Context, pool *pgxpool.Pool, user string) ([]string, error) {
	rows, err := pool.Query(ctx, `
		SELECT pg_describe_object(d.classid, d.objid, d.objsubid)
		FROM pg_shdepend d
		WHERE d.refclassid = 'pg_authid'::regclass AND d.deptype = 'o'
		  AND d.refobjid = (SELECT oid FROM pg_roles WHERE rolname = $1::text)
		  AND d.dbid IN (0, (SELECT oid FROM pg_database WHERE datname = current_database()))
		ORDER BY 1`, user)
	if err != nil {
		return nil, fmt.Errorf("dbsetup: listing what %s owns: %w", user, err)
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

func step(what string, err error) error { return fmt.Errorf("dbsetup: %s: %w", what, err) }

func ident(s string) string { return pgx.Identifier{s}.Sanitize() }
