package pgstore

import (
	"context"
	"embed"
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
// procedure and the functions the Store calls. They are plain SQL, applied
// in the schema Migrate is given; the goose annotations in them are
// comments to everything but goose, so the same files can be copied into a
// goose, tern, Atlas or Flyway migration set (a copy is kept beside the
// project's migrations, in migrations/idempotency/).
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
	// CronAuto schedules the hourly purge with pg_cron wherever pg_cron
	// lives: with cron.schedule when this is the database named by
	// cron.database_name, else with cron.schedule_in_database from a
	// connection to that database. When neither is possible Migrate fails
	// before applying anything.
	CronAuto CronMode = ""
	// CronOff schedules nothing: the user calls
	// CALL <schema>.purge_expired_idempotency_keys() from a scheduler of
	// their own (an EventBridge rule and a function, a Kubernetes CronJob).
	CronOff CronMode = "off"
)

// MigrateOptions configures Migrate and Uninstall. A nil *MigrateOptions
// means all defaults.
type MigrateOptions struct {
	// Schema is where the key store's table, procedure and functions are
	// created; it is created when missing. A Store reads it with the same
	// name in Options.Schema. Defaults to "", the connection's current
	// schema (the first of its search_path that exists, public by default).
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
	// Purge is the pg_cron job that runs the purge; nil with CronOff.
	Purge *CronJob
}

// CronJob is a pg_cron job scheduled by Migrate.
type CronJob struct {
	// Name is the job's name in cron.job.
	Name string
	// CronDatabase is the database pg_cron keeps its jobs in
	// (cron.database_name).
	CronDatabase string
	// Database is the database the job runs in.
	Database string
	// Command is what the job runs.
	Command string
}

var (
	// ErrNoPgCron is returned by Migrate with CronAuto when the server does
	// not run pg_cron. Nothing was applied.
	ErrNoPgCron = errors.New("pgstore: pg_cron is not available on this server")
	// ErrCronElsewhere is returned by Migrate with CronAuto when pg_cron
	// keeps its jobs in another database (cron.database_name) and the
	// connection's user cannot schedule a job there. Nothing was applied.
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
// database: the UNLOGGED table idempotency_keys, the purge procedure, the
// functions a Store calls, and (with CronAuto) the hourly pg_cron job that
// calls the purge. It is safe to call at every start or deploy: migrations
// already applied are skipped, concurrent calls wait for each other, and
// the job is created or updated in place.
//
// Everything is checked before anything is applied: with CronAuto, a
// server without pg_cron gives ErrNoPgCron and a cron database the user
// cannot schedule in gives ErrCronElsewhere, and the database is left as
// it was. The migrations and the schedule then commit together (when pg_cron
// lives in another database, its job is committed right after the
// migrations, on its own connection).
//
// A key store created by the project's earlier goose migrations (the same
// table and procedure in the same schema) is taken over as it is: those
// migrations are recorded as applied and only the newer ones run.
//
// Migrate needs a user that may create objects in the schema; the purge is
// scheduled as that user.
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

	schema, err := resolveSchema(ctx, conn.Conn(), o.Schema)
	if err != nil {
		return nil, err
	}
	res := &MigrateResult{Schema: schema}
	var plan *cronPlan
	if o.Cron == CronAuto {
		if plan, err = planCron(ctx, conn.Conn(), schema); err != nil {
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
		// Taking over a key store made by the project's earlier goose
		// migrations: the table and the procedure are there, unrecorded.
		`INSERT INTO ` + q + `.` + versionTable + ` (version, name)
		SELECT v.version, v.name || ' (found in place)' FROM (VALUES (1, '0001_idempotency_keys.sql'), (2, '0002_purge_procedure.sql')) AS v(version, name)
		WHERE NOT EXISTS (SELECT 1 FROM ` + q + `.` + versionTable + `)
		  AND to_regclass(` + quoteLiteral(q+".idempotency_keys") + `) IS NOT NULL
		  AND (v.version = 1 OR to_regprocedure(` + quoteLiteral(q+".purge_expired_idempotency_keys(integer, integer)") + `) IS NOT NULL)`,
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
	schema, err := resolveSchema(ctx, conn.Conn(), o.Schema)
	if err != nil {
		return err
	}
	if o.Cron == CronAuto {
		if err := unscheduleJobs(ctx, conn.Conn(), schema); err != nil {
			return err
		}
	}
	q := pgx.Identifier{schema}.Sanitize()
	for _, s := range []string{
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_claim(uuid, text, text, text, timestamptz, timestamptz, timestamptz)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_complete(uuid, text, text, text, integer, timestamptz)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_release(uuid, text, text)`,
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_key_renew(uuid, text, text, timestamptz)`,
		// The claim function of the project's earlier goose migrations.
		`DROP FUNCTION IF EXISTS ` + q + `.idempotency_claim(text, uuid, text, text, timestamptz, timestamptz, timestamptz)`,
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

// resolveSchema returns schema, or the connection's current schema.
func resolveSchema(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	if schema != "" {
		return schema, nil
	}
	var cur *string
	if err := conn.QueryRow(ctx, `SELECT current_schema()`).Scan(&cur); err != nil {
		return "", fmt.Errorf("pgstore: migrate: %w", err)
	}
	if cur == nil {
		return "", errors.New("pgstore: migrate: the connection has no current schema (no schema of its search_path exists): set MigrateOptions.Schema")
	}
	return *cur, nil
}

// quoteIdent quotes name as format('%I') does: only when it needs quotes.
func quoteIdent(name string) string {
	plain := name != ""
	for i, r := range name {
		if !(r == '_' || (r >= 'a' && r <= 'z') || (i > 0 && (r >= '0' && r <= '9' || r == '$'))) {
			plain = false
			break
		}
	}
	if plain {
		return name
	}
	return pgx.Identifier{name}.Sanitize()
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// purgeJobName names the purge job of schema in database db. Schemas side
// by side keep jobs of their own; a job scheduled from another database
// names that database too.
func purgeJobName(sameDB bool, db, schema string) string {
	name := "purge-idempotency"
	if !sameDB {
		name += "-" + db
	}
	if schema != "public" {
		name += "-" + schema
	}
	return name
}

// historyJobName trims pg_cron's own run history (cron.job_run_details
// grows by a row a run and pg_cron never trims it); one job per cron
// database.
const historyJobName = "purge-cron-history"

const historyCommand = `DELETE FROM cron.job_run_details WHERE end_time < now() - interval '7 days'`

// cronPlan is where and how the purge will be scheduled, worked out before
// anything is applied.
type cronPlan struct {
	schema, db, cronDB string
	// cron is a connection to the cron database when it is another one,
	// with a transaction open that holds the job until commit.
	cron   *pgx.Conn
	cronTx pgx.Tx
}

func planCron(ctx context.Context, conn *pgx.Conn, schema string) (*cronPlan, error) {
	var db string
	var available, here bool
	err := conn.QueryRow(ctx, `SELECT current_database(),
		EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_cron'),
		EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')`).Scan(&db, &available, &here)
	if err != nil {
		return nil, fmt.Errorf("pgstore: migrate: checking for pg_cron: %w", err)
	}
	offHint := fmt.Sprintf("or migrate with MigrateOptions{Cron: pgstore.CronOff} (cmd/keystore -no-cron) and call CALL %s.purge_expired_idempotency_keys() hourly from a scheduler of your own",
		quoteIdent(schema))
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
		return nil, fmt.Errorf("%w: this user may not read cron.database_name (that needs pg_read_all_settings), and pg_cron is not created in %q, so its jobs live in another database. Either run the migrations in the database named by cron.database_name, or as a user who may read it and call cron.schedule_in_database there; %s",
			ErrCronElsewhere, db, offHint)
	case err != nil:
		return nil, fmt.Errorf("pgstore: migrate: checking for pg_cron: %w", err)
	case cronDB == nil || *cronDB == "":
		return nil, fmt.Errorf("%w: it is not loaded: set shared_preload_libraries = 'pg_cron' and cron.database_name, then restart the server; %s", ErrNoPgCron, offHint)
	}
	plan := &cronPlan{schema: schema, db: db, cronDB: *cronDB}
	if plan.cronDB == db {
		return plan, nil
	}
	// pg_cron keeps its jobs in another database (on Aurora: postgres by
	// default). Schedule from there, as this same user, when it may.
	elsewhere := func(why string) error {
		return fmt.Errorf("%w: cron.database_name is %q and this is %q (%s). Either connect as a user who may call cron.schedule_in_database in %q (pg_cron 1.4 or later; the owner of the pg_cron extension, or rds_superuser on Aurora, or a user granted USAGE on schema cron), or set cron.database_name = '%s' and restart; %s",
			ErrCronElsewhere, plan.cronDB, db, why, plan.cronDB, db, offHint)
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

// schedule creates or updates the jobs: inside tx when pg_cron lives in
// this database, else in a transaction on the cron database that commit
// ends.
func (p *cronPlan) schedule(ctx context.Context, tx pgx.Tx) (*CronJob, error) {
	job := &CronJob{
		Name:         purgeJobName(p.cron == nil, p.db, p.schema),
		CronDatabase: p.cronDB,
		Database:     p.db,
		Command:      fmt.Sprintf("CALL %s.purge_expired_idempotency_keys()", quoteIdent(p.schema)),
	}
	if p.cron == nil {
		for _, s := range []struct {
			sql  string
			args []any
		}{
			{`CREATE EXTENSION IF NOT EXISTS pg_cron`, nil},
			{`SELECT cron.schedule($1::text, '0 * * * *', $2::text)`, []any{job.Name, job.Command}},
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

// unscheduleJobs removes the schema's purge job wherever pg_cron keeps it.
func unscheduleJobs(ctx context.Context, conn *pgx.Conn, schema string) error {
	var db string
	var cronDB *string
	err := conn.QueryRow(ctx, `SELECT current_database(), current_setting('cron.database_name', true)`).Scan(&db, &cronDB)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege {
		// Only the cron database has the extension: look there, i.e. here.
		err = conn.QueryRow(ctx, `SELECT current_database(), current_database()`).Scan(&db, &cronDB)
	}
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: %w", err)
	}
	if cronDB == nil || *cronDB == "" {
		return nil
	}
	target := conn
	if *cronDB != db {
		cfg := conn.Config().Copy()
		cfg.Database = *cronDB
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return fmt.Errorf("pgstore: uninstall: connecting to the cron database %q: %w", *cronDB, err)
		}
		defer c.Close(ctx)
		target = c
	}
	var exists bool
	if err := target.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_cron')`).Scan(&exists); err != nil || !exists {
		return err
	}
	_, err = target.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname = $1::text AND database = $2::text`,
		purgeJobName(*cronDB == db, db, schema), db)
	if err != nil {
		return fmt.Errorf("pgstore: uninstall: unscheduling the purge: %w", err)
	}
	return nil
}
