package pgstore

import (
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrationFiles are the key store's own migrations: the table, the purge
// procedure and the functions the Store calls. They are plain SQL, applied in
// the schema Migrate is given. Their goose annotations are comments to
// everything but goose. So the same files can be copied into a goose, tern,
// Atlas or Flyway migration set. Migrations, or the operations command's -sql,
// gives them out. This folder is their one source.
//
//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the key store's migration files, NNNN_name.sql, in the
// order they apply. Migrate applies them; a project that runs its own
// migration tool copies them (see Migrate for the schedule of the purge,
// which they leave out).
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the embedded folder is always there
	}
	return sub
}

// CronMode says how Migrate schedules the purge of expired keys.
type CronMode string

const (
	// CronAuto schedules the hourly purge with pg_cron wherever pg_cron lives.
	// It uses cron.schedule when this is the database named by
	// cron.database_name. Otherwise it uses cron.schedule_in_database from a
	// connection to that database. When neither is possible Migrate fails
	// before applying anything.
	CronAuto CronMode = ""
	// CronOff schedules nothing. The user calls the purge from a scheduler of
	// their own, such as an EventBridge rule and a function, or a Kubernetes
	// CronJob. The call is CALL <schema>.purge_expired_idempotency_keys(), with
	// the schema quoted where SQL needs it (MigrateResult.PurgeCommand).
	CronOff CronMode = "off"
)

// MigrateOptions configures Migrate and Uninstall. A nil *MigrateOptions
// means all defaults.
type MigrateOptions struct {
	// Schema is where the key store's table, procedure and functions are
	// created; it is created when missing. A Store reads it with the same name
	// in Options.Schema. It is the name as it is, case and all, with no quotes:
	// Migrate quotes it wherever it writes it into SQL. It is at most 63 bytes,
	// the longest name PostgreSQL keeps (max_identifier_length). A longer one
	// is refused, as PostgreSQL would cut it. Defaults to "", the connection's
	// current schema (the first of its search_path that exists, public by
	// default).
	Schema string
	// Cron says how the hourly purge is scheduled. Defaults to CronAuto.
	Cron CronMode
}

// MigrateResult says what Migrate did.
type MigrateResult struct {
	// Schema is the schema the key store lives in.
	Schema string
	// Applied are the migration files applied by this call, in order
	// (none when the store was up to date).
	Applied []string
	// PurgeCommand is the statement that purges expired keys, CALL
	// <schema>.purge_expired_idempotency_keys(). The schema is quoted where SQL
	// needs it, as format's %I quotes. A reserved word is quoted ("order"), and
	// so is upper case ("Keys"). A plain name stays as it is. The pg_cron job
	// runs it. With CronOff, a scheduler of the user's own calls it hourly.
	PurgeCommand string
	// Purge is the pg_cron job that runs the purge; nil with CronOff.
	Purge *CronJob
}

// CronJob is a pg_cron job scheduled by Migrate.
type CronJob struct {
	// Name is the job's name in cron.job, one per key store. It is
	// "purge-idempotency" for the public schema of the cron database, the name
	// that pg_cron users know. Otherwise it is "purge-idempotency
	// <database>.<schema>", each name quoted as SQL would quote it
	// (purge-idempotency app."Keys"). A name longer than pg_cron keeps (63
	// bytes) becomes "purge-idempotency #" and 40 hex digits of its SHA-256.
	Name string
	// CronDatabase is the database pg_cron keeps its jobs in
	// (cron.database_name).
	CronDatabase string
	// Database is the database the job runs in.
	Database string
	// Command is what the job runs (MigrateResult.PurgeCommand).
	Command string
}

var (
	// ErrNoPgCron is returned by Migrate with CronAuto when the server does
	// not run pg_cron. Nothing was applied.
	ErrNoPgCron = errors.New("pgstore: pg_cron is not available on this server")
	// ErrCronElsewhere is returned by Migrate with CronAuto when pg_cron keeps
	// its jobs in another database (cron.database_name) and the connection's
	// user cannot schedule a job there. The message gives the statements that
	// let it (CronGrants). Nothing was applied.
	ErrCronElsewhere = errors.New("pgstore: pg_cron runs in another database, where this user cannot schedule the purge")
)

// versionTable records the applied migrations, in the key store's schema.
const versionTable = "idempotency_store_version"

// migration is one embedded file.
type migration struct {
	version int
	name    string
	sql     string
}

func loadMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrationFiles, "migrations")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		v, err := strconv.Atoi(strings.SplitN(e.Name(), "_", 2)[0])
		if err != nil {
			return nil, fmt.Errorf("pgstore: migration %s has no version number", e.Name())
		}
		b, err := migrationFiles.ReadFile(path.Join("migrations", e.Name()))
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: e.Name(), sql: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].version < ms[j].version })
	return ms, nil
}

// Migrate creates or updates the key store in one schema of the pool's
// database. That is the UNLOGGED table idempotency_keys, the purge procedure
// and the functions a Store calls. With CronAuto, it is also the hourly pg_cron
// job that calls the purge. It is safe to call at every start or deploy:
// migrations already applied are skipped, concurrent calls wait for each other,
// and the job is created or updated in place.
//
// Everything is checked before anything is applied, and a failed check leaves
// the database as it was. With CronAuto, a server without pg_cron gives
// ErrNoPgCron. A cron database the user cannot schedule in gives
// ErrCronElsewhere. The migrations and the schedule then commit together (when
// pg_cron lives in another database, its job is committed right after the
// migrations, on its own connection).
//
// Migrate needs a user that may create objects in the schema; the purge is
// scheduled as that user. When pg_cron keeps its jobs in another database,
// that user needs CronGrants' statements too; without them Migrate returns
// ErrCronElsewhere, which gives them.
func Migrate(ctx context.Context, pool *pgxpool.Pool, opts *MigrateOptions) (*MigrateResult, error) {
	o := MigrateOptions{}
	if opts != nil {
		o = *opts
	}
	if o.Cron != CronAuto && o.Cron != CronOff {
		return nil, fmt.Errorf("pgstore: MigrateOptions.Cron is %q: use CronAuto (\"\") or CronOff (%q)", o.Cron, CronOff)
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer conn.Release()

	t, err := resolveTarget(ctx, conn.Conn(), o.Schema, "migrate")
	if err != nil {
		return nil, err
	}
	schema := t.schema
	res := &MigrateResult{Schema: schema, PurgeCommand: t.purge}
	var plan *cronPlan
	if o.Cron == CronAuto {
		if plan, err = planCron(ctx, conn.Conn(), t); err != nil {
			return nil, err
		}
		defer plan.close(context.WithoutCancel(ctx))
	}

	tx, err := conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtext('ichido idempotency store ' || `+quoteLiteral(schema)+`))`); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	// CREATE SCHEMA IF NOT EXISTS would ask for the right to create schemas
	// even when the schema is there; ask only when it is not.
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1::text)`, schema).Scan(&exists); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	if !exists {
		if _, err := tx.Exec(ctx, `CREATE SCHEMA `+q); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: creating schema %s: %w", schema, err)
		}
	}
	steps := []string{
		`SET LOCAL search_path TO ` + q,
		`CREATE TABLE IF NOT EXISTS ` + q + `.` + versionTable + ` (
			version    integer     PRIMARY KEY,
			name       text        NOT NULL,
			applied_at timestamptz NOT NULL DEFAULT now())`,
	}
	for _, s := range steps {
		if _, err := tx.Exec(ctx, s); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: preparing schema %s: %w", schema, err)
		}
	}
	applied := map[int]bool{}
	rows, err := tx.Query(ctx, `SELECT version FROM `+q+`.`+versionTable)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: %w", err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	for _, m := range ms {
		if applied[m.version] {
			continue
		}
		// The simple protocol runs a file of several statements at once.
		if _, err := tx.Conn().PgConn().Exec(ctx, m.sql).ReadAll(); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: applying %s in schema %s: %w", m.name, schema, err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO `+q+`.`+versionTable+` (version, name) VALUES ($1, $2)`, m.version, m.name); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: recording %s: %w", m.name, err)
		}
		res.Applied = append(res.Applied, m.name)
	}
	if plan != nil {
		if res.Purge, err = plan.schedule(ctx, tx); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: %w", err)
	}
	if plan != nil {
		if err := plan.commit(ctx); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Uninstall removes the key store from its schema: the pg_cron jobs
// Migrate scheduled, the functions, the procedure, the table and the
// version table. The schema itself is left. Every record is lost.
func Uninstall(ctx context.Context, pool *pgxpool.Pool, opts *MigrateOptions) error {
	o := MigrateOptions{}
	if opts != nil {
		o = *opts
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: %w", err)
	}
	defer conn.Release()
	t, err := resolveTarget(ctx, conn.Conn(), o.Schema, "uninstall")
	if err != nil {
		return err
	}
	if o.Cron == CronAuto {
		if err := unscheduleJobs(ctx, conn.Conn(), t); err != nil {
			return err
		}
	}
	q := pgx.Identifier{t.schema}.Sanitize()
	for _, s := range []string{
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_claim(uuid, text, text, text, timestamptz, timestamptz, timestamptz)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_complete(uuid, text, text, text, integer, timestamptz)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_release(uuid, text, text)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_renew(uuid, text, text, timestamptz)`,
		`DROP PROCEDURE IF EXISTS ` + q + `.purge_expired_idempotency_keys(integer, integer)`,
		`DROP TABLE IF EXISTS ` + q + `.idempotency_keys`,
		`DROP TABLE IF EXISTS ` + q + `.` + versionTable,
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("pgstore: uninstall: %w", err)
		}
	}
	return nil
}

// target is the schema of a key store, and what SQL needs of it.
type target struct {
	// schema is the schema's name, as given or the connection's current
	// schema.
	schema string
	// db is the connection's database.
	db string
	// purge is the purge's CALL statement, the schema quoted as needed.
	purge string
}

// resolveTarget returns the target of schema, or of the connection's
// current schema, after checking that PostgreSQL keeps the name as it is.
// op names the operation in errors.
func resolveTarget(ctx context.Context, conn *pgx.Conn, schema, op string) (target, error) {
	if strings.IndexByte(schema, 0) >= 0 {
		return target{}, fmt.Errorf("pgstore: %s: the schema name %q holds a NUL byte, which no PostgreSQL name can", op, schema)
	}
	var name, kept, purge *string
	var db string
	var limit int
	// A text cast to name is cut as PostgreSQL cuts every identifier, at a
	// character boundary. format's %I quotes as SQL needs (reserved words,
	// upper case, other characters), and only then.
	err := conn.QueryRow(ctx, `SELECT s, s::name::text, current_database(),
			format('CALL %I.purge_expired_idempotency_keys()', s), current_setting('max_identifier_length')::int
		FROM (SELECT coalesce(nullif($1::text, ''), current_schema()::text) AS s) AS t`, schema).Scan(&name, &kept, &db, &purge, &limit)
	if err != nil {
		return target{}, fmt.Errorf("pgstore: %s: %w", op, err)
	}
	if name == nil {
		return target{}, fmt.Errorf("pgstore: %s: the connection has no current schema (no schema of its search_path exists): set MigrateOptions.Schema", op)
	}
	if *kept != *name {
		return target{}, fmt.Errorf("pgstore: %s: the schema name %q is %d bytes long, and PostgreSQL keeps names of at most %d bytes: it would cut it to %q. Choose a name of %d bytes or fewer",
			op, *name, len(*name), limit, *kept, limit)
	}
	return target{schema: *name, db: db, purge: *purge}, nil
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// purgeJobBase is the name of the purge job of the public schema of the
// cron database, and the start of every other one.
const purgeJobBase = "purge-idempotency"

// purgeJobName names the purge job of t, whose database is the cron
// database when inCronDB. The name is one per key store of a cron
// database: the database and the schema, quoted as SQL quotes names (so
// that no two pairs give one name), or a hash of that when pg_cron, which
// keeps job names as PostgreSQL names, would cut it.
func purgeJobName(ctx context.Context, conn *pgx.Conn, inCronDB bool, t target) (string, error) {
	if inCronDB && t.schema == "public" {
		return purgeJobBase, nil
	}
	var name string
	var whole bool
	err := conn.QueryRow(ctx, `SELECT n, n::name::text = n
		FROM (SELECT $1::text || ' ' || quote_ident($2::text) || '.' || quote_ident($3::text) AS n) AS t`,
		purgeJobBase, t.db, t.schema).Scan(&name, &whole)
	if err != nil {
		return "", err
	}
	if !whole {
		sum := sha256.Sum256([]byte(name))
		name = purgeJobBase + " #" + hex.EncodeToString(sum[:20])
	}
	return name, nil
}

// earlierPurgeJobName is the name earlier builds gave the purge job of
// schema in database db; it could name two key stores alike.
func earlierPurgeJobName(inCronDB bool, db, schema string) string {
	name := purgeJobBase
	if !inCronDB {
		name += "-" + db
	}
	if schema != "public" {
		name += "-" + schema
	}
	return name
}

// unscheduleEarlierJob removes the job of the earlier name of t's purge
// (earlierPurgeJobName) that this user scheduled, when it is not the job
// of the current name.
const unscheduleEarlierJob = `SELECT cron.unschedule(jobid) FROM cron.job
	WHERE jobname = $1::text::name AND jobname <> $2::text::name AND username = current_user
	  AND command LIKE 'CALL %.purge_expired_idempotency_keys()'`

// historyJobName trims pg_cron's own run history (cron.job_run_details
// grows by a row a run and pg_cron never trims it); one job per cron
// database.
const historyJobName = "purge-cron-history"

const historyCommand = `DELETE FROM cron.job_run_details WHERE end_time < now() - interval '7 days'`

// cronPlan is where and how the purge will be scheduled, worked out before
// anything is applied.
type cronPlan struct {
	target
	cronDB string
	// name is the purge job's name.
	name string
	// cron is a connection to the cron database when it is another one,
	// with a transaction open that holds the job until commit.
	cron   *pgx.Conn
	cronTx pgx.Tx
}

func planCron(ctx context.Context, conn *pgx.Conn, t target) (*cronPlan, error) {
	db := t.db
	var available, here bool
	var user string
	err := conn.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_cron'),
		EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron'),
		current_user`).Scan(&available, &here, &user)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: checking for pg_cron: %w", err)
	}
	offHint := fmt.Sprintf("or migrate with MigrateOptions{Cron: pgstore.CronOff} (cmd/keystore -no-cron) and call %s hourly from a scheduler of your own",
		t.purge)
	if !available {
		return nil, fmt.Errorf("%w: the extension is not installed (Debian: apt-get install postgresql-15-cron; Aurora: add pg_cron to shared_preload_libraries in the cluster parameter group), %s", ErrNoPgCron, offHint)
	}
	// cron.database_name can be read by superusers and members of
	// pg_read_all_settings only.
	var cronDB *string
	err = conn.QueryRow(ctx, `SELECT current_setting('cron.database_name', true)`).Scan(&cronDB)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege:
		if here {
			// The extension exists only in the cron database.
			cronDB = &db
			break
		}
		return nil, fmt.Errorf("%w: this user may not read cron.database_name (that needs pg_read_all_settings), and pg_cron is not created in %q, so its jobs live in another database. Either run the migrations in the database named by cron.database_name, or let this user schedule there: %s; %s",
			ErrCronElsewhere, db, cronGrantsHint(user, ""), offHint)
	case err != nil:
		return nil, fmt.Errorf("pgstore: migrate: checking for pg_cron: %w", err)
	case cronDB == nil || *cronDB == "":
		return nil, fmt.Errorf("%w: it is not loaded: set shared_preload_libraries = 'pg_cron' and cron.database_name, then restart the server; %s", ErrNoPgCron, offHint)
	}
	plan := &cronPlan{target: t, cronDB: *cronDB}
	if plan.name, err = purgeJobName(ctx, conn, plan.cronDB == db, t); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: naming the purge job: %w", err)
	}
	if plan.cronDB == db {
		return plan, nil
	}
	// pg_cron keeps its jobs in another database (on Aurora: postgres by
	// default). Schedule from there, as this same user, when it may.
	elsewhere := func(why string) error {
		return fmt.Errorf("%w: cron.database_name is %q and this is %q (%s). Either let this user schedule there: %s; or set cron.database_name = '%s' and restart; %s",
			ErrCronElsewhere, plan.cronDB, db, why, cronGrantsHint(user, plan.cronDB), db, offHint)
	}
	cfg := conn.Config().Copy()
	cfg.Database = plan.cronDB
	cronConn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, elsewhere("connecting to it failed: " + err.Error())
	}
	var installed, may bool
	err = cronConn.QueryRow(ctx, `SELECT
		EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron'),
		CASE WHEN has_schema_privilege('cron', 'USAGE') THEN EXISTS (
			SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
			WHERE n.nspname = 'cron' AND p.proname = 'schedule_in_database' AND has_function_privilege(p.oid, 'EXECUTE'))
		ELSE false END`).Scan(&installed, &may)
	switch {
	case err != nil && strings.Contains(err.Error(), `schema "cron" does not exist`):
		installed = false
	case err != nil:
		_ = cronConn.Close(ctx)
		return nil, elsewhere("checking it failed: " + err.Error())
	}
	switch {
	case !installed:
		_ = cronConn.Close(ctx)
		return nil, elsewhere("the pg_cron extension is not created there: CREATE EXTENSION pg_cron in it first")
	case !may:
		_ = cronConn.Close(ctx)
		return nil, elsewhere("this user may not call cron.schedule_in_database there")
	}
	plan.cron = cronConn
	return plan, nil
}

// cronGrantsHint is the advice of ErrCronElsewhere: CronGrants' statements
// for user, where each runs; cronDB is "" when the user cannot read it.
func cronGrantsHint(user, cronDB string) string {
	g := CronGrants(user)
	where := "in the database named by cron.database_name"
	if cronDB != "" {
		where = fmt.Sprintf("in database %q", cronDB)
	}
	return fmt.Sprintf("as a superuser (on Aurora, the master user, a member of rds_superuser) run %s; and, %s, %s; %s; "+
		"(pgstore.CronGrants gives these; USAGE on schema cron alone is not enough, since pg_cron 1.4 and later revoke EXECUTE on cron.schedule_in_database from PUBLIC)",
		g[0], where, g[1], g[2])
}

// schedule creates or updates the jobs: inside tx when pg_cron lives in
// this database, else in a transaction on the cron database that commit
// ends.
func (p *cronPlan) schedule(ctx context.Context, tx pgx.Tx) (*CronJob, error) {
	job := &CronJob{
		Name:         p.name,
		CronDatabase: p.cronDB,
		Database:     p.db,
		Command:      p.purge,
	}
	earlier := earlierPurgeJobName(p.cron == nil, p.db, p.schema)
	if p.cron == nil {
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{`CREATE EXTENSION IF NOT EXISTS pg_cron`, nil},
			{`SELECT cron.schedule($1::text, '0 * * * *', $2::text)`, []any{job.Name, job.Command}},
			{unscheduleEarlierJob, []any{earlier, job.Name}},
			{`SELECT cron.schedule($1::text, '30 3 * * *', $2::text)`, []any{historyJobName, historyCommand}},
		} {
			if _, err := tx.Exec(ctx, s.sql, s.args...); err != nil {
				return nil, fmt.Errorf("pgstore: migrate: scheduling the purge with pg_cron: %w", err)
			}
		}
		return job, nil
	}
	var err error
	if p.cronTx, err = p.cron.Begin(ctx); err != nil {
		return nil, fmt.Errorf("pgstore: migrate: scheduling the purge in database %q: %w", p.cronDB, err)
	}
	for _, s := range []struct {
		sql  string
		args []any
	}{
		{`SELECT cron.schedule_in_database($1::text, '0 * * * *', $2::text, $3::text)`, []any{job.Name, job.Command, p.db}},
		{unscheduleEarlierJob, []any{earlier, job.Name}},
		{`SELECT cron.schedule($1::text, '30 3 * * *', $2::text)`, []any{historyJobName, historyCommand}},
	} {
		if _, err := p.cronTx.Exec(ctx, s.sql, s.args...); err != nil {
			return nil, fmt.Errorf("pgstore: migrate: scheduling the purge in database %q (cron.database_name): %w", p.cronDB, err)
		}
	}
	return job, nil
}

func (p *cronPlan) commit(ctx context.Context) error {
	if p.cronTx == nil {
		return nil
	}
	if err := p.cronTx.Commit(ctx); err != nil {
		return fmt.Errorf("pgstore: migrate: the key store is in place but its purge job in database %q was not saved (run Migrate again): %w", p.cronDB, err)
	}
	p.cronTx = nil
	return nil
}

func (p *cronPlan) close(ctx context.Context) {
	if p.cron != nil {
		if p.cronTx != nil {
			_ = p.cronTx.Rollback(ctx)
		}
		_ = p.cron.Close(ctx)
	}
}

// unscheduleJobs removes the purge job of t wherever pg_cron keeps it,
// under its name and under the name earlier builds gave it.
func unscheduleJobs(ctx context.Context, conn *pgx.Conn, t target) error {
	db := t.db
	var cronDB *string
	err := conn.QueryRow(ctx, `SELECT current_setting('cron.database_name', true)`).Scan(&cronDB)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
		// Only the cron database has the extension: look there, i.e. here.
		cronDB, err = &db, nil
	}
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: %w", err)
	}
	if cronDB == nil || *cronDB == "" {
		return nil
	}
	on := conn
	if *cronDB != db {
		cfg := conn.Config().Copy()
		cfg.Database = *cronDB
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("pgstore: uninstall: connecting to the cron database %q: %w", *cronDB, err)
		}
		defer c.Close(ctx)
		on = c
	}
	var exists bool
	if err := on.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')`).Scan(&exists); err != nil || !exists {
		return err
	}
	name, err := purgeJobName(ctx, conn, *cronDB == db, t)
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: naming the purge job: %w", err)
	}
	_, err = on.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job
		WHERE jobname IN ($1::text::name, $2::text::name) AND database = $3::text`,
		name, earlierPurgeJobName(*cronDB == db, db, t.schema), db)
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: unscheduling the purge: %w", err)
	}
	return nil
}
