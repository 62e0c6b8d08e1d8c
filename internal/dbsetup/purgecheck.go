package dbsetup

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// PurgeHealthFunction is the function through which the purge check reads
// what it needs, created by the setup in the application's schema. It runs
// as its owner, the migrate user (SECURITY DEFINER), since pg_cron shows a
// user its own jobs and runs only; the check user may call it and has no
// other privilege, so the check never sees a stored response or acts as
// the migrate user.
const PurgeHealthFunction = "purge_health"

// purgeHealthSQL creates PurgeHealthFunction in schema %[1]s: the counts of
// the migrate user's purge jobs and of their runs within the window, the
// newest failure's message, the key table's size, and, unless
// expired_before is null, how many keys expired before it (at most
// expired_cap).
const purgeHealthSQL = `
CREATE OR REPLACE FUNCTION %[1]s.purge_health(window_seconds double precision, expired_before timestamptz, expired_cap bigint)
RETURNS TABLE (purge_jobs bigint, runs_succeeded bigint, runs_failed bigint, last_failure text, key_table_bytes bigint, expired_keys bigint)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
	SELECT (SELECT count(*) FROM cron.job WHERE username = current_user AND jobname LIKE 'purge-%%'),
	       count(*) FILTER (WHERE d.status = 'succeeded'),
	       count(*) FILTER (WHERE d.status = 'failed'),
	       (array_agg(d.return_message ORDER BY d.start_time DESC) FILTER (WHERE d.status = 'failed'))[1],
	       pg_total_relation_size('%[1]s.idempotency_keys'::regclass),
	       CASE WHEN expired_before IS NULL THEN 0
	            ELSE (SELECT count(*) FROM (SELECT 1 FROM %[1]s.idempotency_keys WHERE expires_at < expired_before LIMIT expired_cap) s) END
	FROM cron.job_run_details d JOIN cron.job j USING (jobid)
	WHERE d.username = current_user AND j.jobname LIKE 'purge-%%' AND d.start_time > now() - make_interval(secs => window_seconds)
$fn$`

// InstallPurgeHealth creates (or replaces) PurgeHealthFunction in schema,
// as the pool's user, its owner (the migrate user), and lets checkUser, and
// no one else, call it.
func InstallPurgeHealth(ctx context.Context, pool *pgxpool.Pool, schema, checkUser string) error {
	fn := ident(schema) + "." + PurgeHealthFunction + "(double precision, timestamptz, bigint)"
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for _, s := range []struct{ what, sql string }{
			{"creating the purge check's function", fmt.Sprintf(purgeHealthSQL, ident(schema))},
			{"revoking the purge check's function from PUBLIC", `REVOKE ALL ON FUNCTION ` + fn + ` FROM PUBLIC`},
			{"letting " + checkUser + " call the purge check's function", `GRANT EXECUTE ON FUNCTION ` + fn + ` TO ` + ident(checkUser)},
		} {
			if _, err := tx.Exec(ctx, s.sql); err != nil {
				return step(s.what, err)
			}
		}
		return nil
	})
}

// PurgeCheck reads, in operation, whether the purge jobs do their work:
// pg_cron's runs of the migrate user's purge-* jobs and the key table,
// through PurgeHealthFunction. The purge check function runs it on a
// schedule, as the check user, and prints it as CloudWatch embedded metrics
// (namespace Namespace, dimension FunctionName), on which the stack's purge
// alarm goes off.
type PurgeCheck struct {
	// Schema holds the key table and PurgeHealthFunction. Defaults to
	// "public".
	Schema string
	// Window is how far back the check counts runs; it must hold a run of
	// the hourly key purge. Defaults to 2 hours.
	Window time.Duration
	// Grace is how long past its expiry a key may stay before it counts as
	// left behind by the purge (ExpiredKeys). The hourly purge removes it
	// within an hour. Defaults to 2 hours.
	Grace time.Duration
	// FunctionName is the metrics' dimension (the function's name).
	FunctionName string
	// UpSince says since when the database has been up, so that a check
	// after a pause does not count the purge runs due while it was paused.
	// Defaults to pg_postmaster_start_time(), which a resume from Aurora's
	// auto-pause resets, as it does a reboot or a failover.
	UpSince func(ctx context.Context, tx pgx.Tx) (time.Time, error)
}

// purgeEvery is the key purge's schedule (hourly, on the hour), and
// purgeMargin how long after its instant a run must have ended.
const (
	purgeEvery  = time.Hour
	purgeMargin = 5 * time.Minute
)

// purgesDue counts the key purge's instants (every hour on the hour) that
// fell while the database was up, within the window, at least purgeMargin
// before now, and returns the latest of them.
func purgesDue(now, upSince time.Time, window time.Duration) (int64, time.Time) {
	from := now.Add(-window)
	if upSince.After(from) {
		from = upSince
	}
	until := now.Add(-purgeMargin)
	var n int64
	var last time.Time
	for t := from.Truncate(purgeEvery).Add(purgeEvery); !t.After(until); t = t.Add(purgeEvery) {
		n, last = n+1, t
	}
	return n, last
}

// Namespace is the CloudWatch namespace of the purge metrics: the
// idempotency decorator's own.
const Namespace = "ichido"

// expiredCap bounds the count of keys left behind, so that the check stays
// cheap on a table the purge has fallen far behind on.
const expiredCap = 1_000_000

// PurgeHealth is what the check found. Its fields are the metrics.
type PurgeHealth struct {
	// PurgeJobs is how many purge-* jobs the migrate user has scheduled.
	PurgeJobs int64
	// PurgeRunsSucceeded and PurgeRunsFailed count their runs within the
	// window.
	PurgeRunsSucceeded int64
	PurgeRunsFailed    int64
	// PurgeRunsDue counts the hourly key purge's runs that were due within
	// the window while the database was up. A paused cluster runs no job,
	// so its check counts none due and misses none.
	PurgeRunsDue int64
	// LastFailure is the newest failed run's message, for the log.
	LastFailure string
	// KeyTableBytes is the key table's size with its indexes and TOAST.
	KeyTableBytes int64
	// ExpiredKeys counts keys expired for longer than the grace, and
	// before the last purge due while the database was up (at most a
	// million): the keys a purge should have removed.
	ExpiredKeys int64
}

// Healthy is the alarm's rule: at least one purge job, no failed run
// within the window, a successful one when a run was due, and no key left
// behind.
func (h PurgeHealth) Healthy() bool {
	return h.PurgeJobs > 0 && h.PurgeRunsFailed == 0 && (h.PurgeRunsDue == 0 || h.PurgeRunsSucceeded > 0) && h.ExpiredKeys == 0
}

func (c *PurgeCheck) defaults() PurgeCheck {
	d := *c
	if d.Schema == "" {
		d.Schema = "public"
	}
	if d.Window <= 0 {
		d.Window = 2 * time.Hour
	}
	if d.Grace <= 0 {
		d.Grace = 2 * time.Hour
	}
	if d.UpSince == nil {
		d.UpSince = func(ctx context.Context, tx pgx.Tx) (time.Time, error) {
			var t time.Time
			return t, tx.QueryRow(ctx, `SELECT pg_postmaster_start_time()`).Scan(&t)
		}
	}
	return d
}

// Read reads the purge's health through pool, in one read-only transaction.
func (c *PurgeCheck) Read(ctx context.Context, pool *pgxpool.Pool) (PurgeHealth, error) {
	cfg := c.defaults()
	var h PurgeHealth
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var now time.Time
		if err := tx.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return err
		}
		upSince, err := cfg.UpSince(ctx, tx)
		if err != nil {
			return fmt.Errorf("reading since when the database is up: %w", err)
		}
		var lastDue time.Time
		h.PurgeRunsDue, lastDue = purgesDue(now, upSince, cfg.Window)
		// With no purge due while the database was up, none left a key
		// behind: the function counts none (a null instant).
		var before *time.Time
		if h.PurgeRunsDue > 0 {
			b := now.Add(-cfg.Grace)
			if lastDue.Before(b) {
				b = lastDue
			}
			before = &b
		}
		var last *string
		if err := tx.QueryRow(ctx, `SELECT purge_jobs, runs_succeeded, runs_failed, last_failure, key_table_bytes, expired_keys FROM `+
			ident(cfg.Schema)+`.`+PurgeHealthFunction+`($1, $2, $3)`, cfg.Window.Seconds(), before, expiredCap).Scan(
			&h.PurgeJobs, &h.PurgeRunsSucceeded, &h.PurgeRunsFailed, &last, &h.KeyTableBytes, &h.ExpiredKeys); err != nil {
			return fmt.Errorf("calling %s (the setup creates it and lets the check user call it): %w", PurgeHealthFunction, err)
		}
		if last != nil {
			h.LastFailure = *last
		}
		return nil
	})
	if err != nil {
		return h, fmt.Errorf("dbsetup: purge check: %w", err)
	}
	return h, nil
}

// Run reads the purge's health and writes it to out as one CloudWatch
// embedded metric format line (Lambda's log turns it into metrics). It
// returns the health, as the invocation's result.
func (c *PurgeCheck) Run(ctx context.Context, pool *pgxpool.Pool, out io.Writer) (PurgeHealth, error) {
	h, err := c.Read(ctx, pool)
	if err != nil {
		return h, err
	}
	return h, WriteEMF(out, c.FunctionName, time.Now(), h)
}

// WriteEMF writes h as one line in CloudWatch's embedded metric format.
func WriteEMF(out io.Writer, functionName string, at time.Time, h PurgeHealth) error {
	type metric struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": at.UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  Namespace,
				"Dimensions": [][]string{{"FunctionName"}},
				"Metrics": []metric{
					{"PurgeCheckRan", "Count"}, {"PurgeJobs", "Count"}, {"PurgeRunsSucceeded", "Count"}, {"PurgeRunsFailed", "Count"},
					{"PurgeRunsDue", "Count"}, {"KeyTableBytes", "Bytes"}, {"ExpiredKeys", "Count"},
				},
			}},
		},
		"FunctionName":       functionName,
		"PurgeCheckRan":      1, // the heartbeat: its absence fires the alarm
		"PurgeJobs":          h.PurgeJobs,
		"PurgeRunsDue":       h.PurgeRunsDue,
		"PurgeRunsSucceeded": h.PurgeRunsSucceeded,
		"PurgeRunsFailed":    h.PurgeRunsFailed,
		"KeyTableBytes":      h.KeyTableBytes,
		"ExpiredKeys":        h.ExpiredKeys,
		"healthy":            h.Healthy(),
	}
	if h.LastFailure != "" {
		line["lastFailure"] = h.LastFailure
	}
	b, err := json.Marshal(line)
	if err != nil {
		return err
	}
	_, err = out.Write(append(b, '\n'))
	return err
}
