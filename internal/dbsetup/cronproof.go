package dbsetup

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrCronCannotRun is matched (errors.Is) by the error of a setup that
// could not see pg_cron run a job as the migrate user: the purge jobs
// would fail the same way, silently, and the key table would grow without
// bound.
var ErrCronCannotRun = errors.New("dbsetup: pg_cron cannot run the migrate user's jobs")

// ProbeJob is the name of the job the setup schedules to see pg_cron run a
// job as the migrate user. It is removed once it has run (or has not, in
// time).
const ProbeJob = "setup-cron-probe"

// probeCommand is what the probe runs: the least a job can do once pg_cron
// has logged in as its user.
const probeCommand = `SELECT 1`

// cronFix is what an operator can change when pg_cron cannot run the
// migrate user's jobs. How pg_cron starts a job (a background worker or a
// client session, cron.use_background_workers) is the platform's: Aurora
// and RDS do not let a user modify it, so the text names only what a
// parameter group, a reboot or a grant can change.
const cronFix = "Check what an operator can change: the cluster parameter group (ClusterParameterGroup) must load pg_cron (shared_preload_libraries) and schedule in this database (cron.database_name); " +
	"both are static, so after changing them reboot the writer (aws rds reboot-db-instance) and deploy again. " +
	"The migrate user must keep its LOGIN and rds_iam. How pg_cron starts jobs is the platform's and cannot be set; if the settings above hold, the run's message says what else stopped it"

// CronProof says how the setup knows that pg_cron runs the migrate user's
// jobs.
type CronProof struct {
	// Evidence is "recent run" when a job of the migrate user succeeded
	// within CronEvidenceAge and none failed after it, or "probe" when the
	// setup scheduled ProbeJob and saw it succeed.
	Evidence string `json:"evidence"`
	// Job is the job whose run is the proof.
	Job string `json:"job"`
	// RanAt is when that run ended.
	RanAt time.Time `json:"ranAt"`
	// Waited is how long the setup waited for the probe (0 with a recent
	// run).
	Waited time.Duration `json:"waited"`
}

// ProveCron shows that pg_cron runs jobs as the pool's user (the migrate
// user, whose jobs are the purges) and returns how. A job of that user that
// succeeded within evidenceAge, with no failed run after it, is proof
// enough. Otherwise it schedules ProbeJob every minute (pg_cron 1.4
// schedules by the minute), waits up to timeout for its first run, and
// removes it. A failed run, or none in time, is ErrCronCannotRun with what
// the run said and what to change.
func ProveCron(ctx context.Context, pool *pgxpool.Pool, evidenceAge, timeout time.Duration) (CronProof, error) {
	var p CronProof
	// pg_cron shows a user its own jobs and runs only.
	err := pool.QueryRow(ctx, `
		SELECT coalesce(j.jobname, d.command), d.end_time
		FROM cron.job_run_details d LEFT JOIN cron.job j USING (jobid)
		WHERE d.username = current_user AND d.status = 'succeeded' AND d.end_time > now() - make_interval(secs => $1)
		  AND NOT EXISTS (SELECT 1 FROM cron.job_run_details f
		                  WHERE f.username = current_user AND f.status = 'failed' AND f.start_time > d.start_time)
		ORDER BY d.end_time DESC LIMIT 1`, evidenceAge.Seconds()).Scan(&p.Job, &p.RanAt)
	switch {
	case err == nil:
		p.Evidence = "recent run"
		return p, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return p, step("reading pg_cron's runs", err)
	}

	p.Evidence, p.Job = "probe", ProbeJob
	started := time.Now()
	var jobID int64
	if err := pool.QueryRow(ctx, `SELECT cron.schedule($1::text, '* * * * *', $2::text)`, ProbeJob, probeCommand).Scan(&jobID); err != nil {
		return p, step("scheduling "+ProbeJob, err)
	}
	defer func() {
		// Even when ctx has ended: a probe left behind would run every
		// minute.
		cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		_, _ = pool.Exec(cleanup, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobid = $1 AND username = current_user`, jobID)
	}()
	wait, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		var status, message string
		err := pool.QueryRow(wait, `
			SELECT status, coalesce(return_message, ''), coalesce(end_time, now())
			FROM cron.job_run_details WHERE jobid = $1 AND status IN ('succeeded', 'failed')
			ORDER BY runid LIMIT 1`, jobID).Scan(&status, &message, &p.RanAt)
		switch {
		case err == nil && status == "succeeded":
			p.Waited = time.Since(started).Round(time.Second)
			return p, nil
		case err == nil:
			return p, fmt.Errorf("%w: its run of job %s failed: %q. %s%s", ErrCronCannotRun, ProbeJob, message, cronFix, settingsNow(ctx, pool))
		case !errors.Is(err, pgx.ErrNoRows) && wait.Err() == nil:
			return p, step("reading the run of "+ProbeJob, err)
		}
		select {
		case <-wait.Done():
			if ctx.Err() != nil {
				return p, step("waiting for pg_cron to run "+ProbeJob, ctx.Err())
			}
			return p, fmt.Errorf("%w: job %s did not run within %v (cron.job_run_details has no run of it). %s; pg_cron must also log its runs (cron.log_run = on) in this database (cron.database_name)%s",
				ErrCronCannotRun, ProbeJob, timeout, cronFix, settingsNow(ctx, pool))
		case <-tick.C:
		}
	}
}

// settingsNow reports pg_cron's settings that the user may read, for an
// error message (cron.database_name is for superusers only).
func settingsNow(ctx context.Context, pool *pgxpool.Pool) string {
	var parts []string
	for _, name := range []string{"cron.use_background_workers", "cron.log_run"} {
		var v *string
		if err := pool.QueryRow(ctx, `SELECT current_setting($1::text, true)`, name).Scan(&v); err == nil {
			parts = append(parts, name+" = "+deref(v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return " (now: " + strings.Join(parts, ", ") + ")"
}
