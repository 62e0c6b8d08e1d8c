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

// PurgeCheck reads, in operation, whether the purge jobs do their work:
// pg_cron's runs of the migrate user's purge-* jobs and the key table. The
// migrate function runs it on a schedule and prints it as CloudWatch
// embedded metrics (namespace Namespace, dimension FunctionName), on which
// the stack's purge alarm goes off.
type PurgeCheck struct {
	// MigrateUser schedules the purge jobs; the check reads their runs as
	// it (pg_cron shows a user its own runs only), through SET ROLE from
	// the connection's user, which the setup lets act as it. Required.
	MigrateUser string
	// Schema holds the key table. Defaults to "public".
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
	if cfg.MigrateUser == "" {
		return h, fmt.Errorf("%w: PurgeCheck.MigrateUser not set", ErrConfig)
	}
	err := pgx.BeginTxFunc(ctx, pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var me string
		if err := tx.QueryRow(ctx, `SELECT current_user`).Scan(&me); err != nil {
			return err
		}
		if me != cfg.MigrateUser {
			if _, err := tx.Exec(ctx, `SET LOCAL ROLE `+ident(cfg.MigrateUser)); err != nil {
				return fmt.Errorf("acting as %s (the setup grants %s SET on it): %w", cfg.MigrateUser, me, err)
			}
		}
		var last *string
		if err := tx.QueryRow(ctx, `
			SELECT (SELECT count(*) FROM cron.job WHERE username = current_user AND jobname LIKE 'purge-%'),
			       count(*) FILTER (WHERE d.status = 'succeeded'),
			       count(*) FILTER (WHERE d.status = 'failed'),
			       (array_agg(d.return_message ORDER BY d.start_time DESC) FILTER (WHERE d.status = 'failed'))[1]
			FROM cron.job_run_details d JOIN cron.job j USING (jobid)
			WHERE d.username = current_user AND j.jobname LIKE 'purge-%' AND d.start_time > now() - make_interval(secs => $1)`,
			cfg.Window.Seconds()).Scan(&h.PurgeJobs, &h.PurgeRunsSucceeded, &h.PurgeRunsFailed, &last); err != nil {
			return fmt.Errorf("reading pg_cron's runs: %w", err)
		}
		if last != nil {
			h.LastFailure = *last
		}
		table := ident(cfg.Schema) + ".idempotency_keys"
		if err := tx.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, table).Scan(&h.KeyTableBytes); err != nil {
			return fmt.Errorf("reading the key table's size: %w", err)
		}
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
		if h.PurgeRunsDue == 0 {
			return nil // no purge was due while it was up: none left a key behind
		}
		before := now.Add(-cfg.Grace)
		if lastDue.Before(before) {
			before = lastDue
		}
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+table+` WHERE expires_at < $1 LIMIT $2) s`,
			before, expiredCap).Scan(&h.ExpiredKeys); err != nil {
			return fmt.Errorf("counting expired keys: %w", err)
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

// IsScheduled says whether event is an EventBridge schedule's ("detail-type":
// "Scheduled Event").
func IsScheduled(event json.RawMessage) bool {
	var e struct {
		DetailType string `json:"detail-type"`
		Source     string `json:"source"`
	}
	return json.Unmarshal(event, &e) == nil && e.DetailType == "Scheduled Event" && e.Source == "aws.events"
}
