package pgtest

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// FakeCronRunner runs the jobs of the pg_cron stand-in (AuroraOptions.
// FakeCron), which only schedules them: as pg_cron does with
// cron.use_background_workers on, each job runs in its database as the
// user that scheduled it, with no login of that user's, and its run is
// recorded in cron.job_run_details (status succeeded or failed, and the
// error's text). A job runs when first seen and then every Every.
type FakeCronRunner struct {
	stop context.CancelFunc
	done sync.WaitGroup
}

// FakeCronOptions configure StartFakeCron.
type FakeCronOptions struct {
	// Every is how often a job runs again. Defaults to a minute, pg_cron's
	// finest schedule before 1.5.
	Every time.Duration
	// Poll is how often the runner looks for jobs. Defaults to 200ms.
	Poll time.Duration
}

// StartFakeCron starts running the stand-in's jobs of a's cluster until
// Stop.
func StartFakeCron(a *Aurora, opts FakeCronOptions) *FakeCronRunner {
	if opts.Every == 0 {
		opts.Every = time.Minute
	}
	if opts.Poll == 0 {
		opts.Poll = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &FakeCronRunner{stop: cancel}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		last := map[int64]time.Time{}
		for {
			_ = r.tick(ctx, a, opts.Every, last)
			select {
			case <-ctx.Done():
				return
			case <-time.After(opts.Poll):
			}
		}
	}()
	return r
}

// Stop stops the runner and waits for a run in progress.
func (r *FakeCronRunner) Stop() {
	r.stop()
	r.done.Wait()
}

type fakeJob struct {
	id                      int64
	command, database, user string
}

func (r *FakeCronRunner) tick(ctx context.Context, a *Aurora, every time.Duration, last map[int64]time.Time) error {
	conn, err := pgx.Connect(ctx, a.URL(""))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT jobid, command, database, username FROM cron.job WHERE active ORDER BY jobid`)
	if err != nil {
		return err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fakeJob, error) {
		var j fakeJob
		return j, row.Scan(&j.id, &j.command, &j.database, &j.user)
	})
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if t, ok := last[j.id]; ok && time.Since(t) < every {
			continue
		}
		last[j.id] = time.Now()
		status, message := "succeeded", ""
		if err := runAs(ctx, a, j); err != nil {
			status, message = "failed", err.Error()
		}
		if _, err := conn.Exec(ctx, `INSERT INTO cron.job_run_details (jobid, job_pid, database, username, command, status, return_message, start_time, end_time)
			VALUES ($1, pg_backend_pid(), $2, $3, $4, $5, $6, $7, clock_timestamp())`,
			j.id, j.database, j.user, j.command, status, message, last[j.id]); err != nil {
			return err
		}
	}
	return nil
}

// runAs runs a job's command in its database as its user, as a background
// worker does: the superuser's session takes the user's identity.
func runAs(ctx context.Context, a *Aurora, j fakeJob) error {
	conn, err := pgx.Connect(ctx, a.URL(j.database))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `SET SESSION AUTHORIZATION `+quoteIdent(j.user)); err != nil {
		return fmt.Errorf("pgtest: fake cron: %w", err)
	}
	_, err = conn.Exec(ctx, j.command)
	return err
}
