package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// httpChecks runs idemcheck against the task API's POST /tasks with the
// token, with ichido's problem format, deleting the tasks it creates, and
// copies its verdicts into the report.
func httpChecks(ctx context.Context, bin, baseURL, token string, r *report) {
	r.section("HTTP: the Idempotency-Key contract on POST /tasks (idemcheck)")
	args := []string{
		"-url", baseURL, "-path", "/tasks",
		"-body", `{"title":"smoke {{unique}}"}`,
		"-H", "Authorization: Bearer ${SMOKE_BEARER}",
		"-problem", "ichido", "-malformed-key", "not-a-uuid", "-concurrent", "3",
		"-delete-created",
	}
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "idemcheck"), args...)
	// The token travels in the environment, not on the command line.
	cmd.Env = append(os.Environ(), "SMOKE_BEARER="+token)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.failf("idemcheck", "%v", err)
		return
	}
	if err := cmd.Start(); err != nil {
		r.failf("idemcheck", "cannot run %s: %v (make smoke builds it)", cmd.Path, err)
		return
	}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "idemcheck: ") {
			continue // the summary: smoke prints its own
		}
		fmt.Fprintln(r.w, line)
		r.verdictLine(line)
	}
	var exit *exec.ExitError
	if err := cmd.Wait(); err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) {
		r.failf("idemcheck", "%v", err)
	}
}

// purgeJob is the key store's purge job and its newest run.
type purgeJob struct {
	id                 int64
	name, schedule     string
	status, message    *string
	startTime, endTime *time.Time
	database, schema   string
	cronIn             string // the database pg_cron keeps its jobs in
}

// purgeChecks reads pg_cron's purge job of the key store that dbURL
// reaches (its database and search_path schema) and its newest run in
// cron.job_run_details. maxAge > 0 fails a newest run older than that.
func purgeChecks(ctx context.Context, dbURL string, maxAge time.Duration, r *report) {
	job, err := readPurgeJob(ctx, dbURL)
	switch {
	case err != nil:
		r.failf("purge-job", "%v", err)
		r.skipf("purge-last-run", "the purge job could not be read")
		return
	case job == nil:
		r.failf("purge-job", "no pg_cron job calls the key store's purge_expired_idempotency_keys() in this database and schema")
		r.skipf("purge-last-run", "no purge job")
		return
	}
	r.passf("purge-job", "%q (job %d) runs %q, in database %s", job.name, job.id, job.schedule, job.cronIn)
	if job.status == nil {
		r.skipf("purge-last-run", "no run in cron.job_run_details yet: the job runs at the top of each hour (%q); run make smoke after it", job.schedule)
		return
	}
	when := "?"
	took := ""
	if job.startTime != nil {
		when = job.startTime.UTC().Format(time.RFC3339)
		if job.endTime != nil {
			took = fmt.Sprintf(" in %s", job.endTime.Sub(*job.startTime).Round(time.Millisecond))
		}
	}
	msg := ""
	if job.message != nil {
		msg = strings.TrimSpace(*job.message)
	}
	switch {
	case *job.status != "succeeded":
		r.failf("purge-last-run", "the newest run, at %s, is %s: %s", when, *job.status, msg)
	case maxAge > 0 && job.startTime != nil && time.Since(*job.startTime) > maxAge:
		r.failf("purge-last-run", "the newest run succeeded at %s, more than %s ago: is pg_cron's launcher running?", when, maxAge)
	default:
		r.passf("purge-last-run", "succeeded at %s%s (%s ago)", when, took, time.Since(*job.startTime).Round(time.Minute))
	}
}

// readPurgeJob finds the purge job; nil when there is none. pg_cron keeps
// its jobs in the database named by cron.database_name, which may be
// another database than the key store's.
func readPurgeJob(ctx context.Context, dbURL string) (*purgeJob, error) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return nil, fmt.Errorf("connecting to the database: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	job := &purgeJob{}
	var cronDB *string
	if err := conn.QueryRow(ctx, `SELECT current_database(), current_schema(), current_setting('cron.database_name', true)`).
		Scan(&job.database, &job.schema, &cronDB); err != nil {
		return nil, fmt.Errorf("reading the database's name: %w", err)
	}
	job.cronIn = job.database
	cron := conn
	if cronDB != nil && *cronDB != "" && *cronDB != job.database {
		cfg := conn.Config().Copy()
		cfg.Database = *cronDB
		if cron, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return nil, fmt.Errorf("pg_cron keeps its jobs in database %q, which this user cannot reach: %w", *cronDB, err)
		}
		defer cron.Close(context.WithoutCancel(ctx))
		job.cronIn = *cronDB
	}
	err = cron.QueryRow(ctx, `
		SELECT j.jobid, coalesce(j.jobname, ''), j.schedule, d.status, d.return_message, d.start_time, d.end_time
		FROM cron.job j
		LEFT JOIN LATERAL (
			SELECT status, return_message, start_time, end_time FROM cron.job_run_details r
			WHERE r.jobid = j.jobid ORDER BY r.start_time DESC NULLS LAST LIMIT 1
		) d ON true
		WHERE j.database = $1 AND j.command = format('CALL %I.purge_expired_idempotency_keys()', $2::text)
		ORDER BY j.jobid LIMIT 1`, job.database, job.schema).
		Scan(&job.id, &job.name, &job.schedule, &job.status, &job.message, &job.startTime, &job.endTime)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.UndefinedTable:
		return nil, fmt.Errorf("database %q has no pg_cron tables (cron.job): is pg_cron created there?", job.cronIn)
	case errors.As(err, &pgErr) && pgErr.Code == pgerrcode.InsufficientPrivilege:
		return nil, fmt.Errorf("this user may not read cron.job in %q: connect as the user that ran the migrations", job.cronIn)
	case err != nil:
		return nil, fmt.Errorf("reading cron.job: %w", err)
	}
	return job, nil
}
