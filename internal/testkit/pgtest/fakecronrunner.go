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
// error's text). As pg_cron 1.4 does, a job runs at the start of each
// minute its schedule names (in UTC), from the minute after the runner
// first sees it: a job scheduled every minute waits up to a minute for its
// first run, an hourly one until the hour.
type FakeCronRunner struct {
	stop context.CancelFunc
	done sync.WaitGroup
}

// FakeCronOptions configure StartFakeCron.
type FakeCronOptions struct {
	// Every, when set, runs each job as soon as the runner sees it and
	// then every Every, whatever its schedule: for tests that cannot wait
	// for an hourly purge. Zero (the default) runs jobs on their
	// schedules, as pg_cron does.
	Every time.Duration
	// Poll is how often the runner looks for jobs. Defaults to 200ms.
	Poll time.Duration
}

// StartFakeCron starts running the stand-in's jobs of a's cluster until
// Stop.
func StartFakeCron(a *Aurora, opts FakeCronOptions) *FakeCronRunner {
	if opts.Poll == 0 {
		opts.Poll = 200 * time.Millisecond
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &FakeCronRunner{stop: cancel}
	r.done.Add(1)
	go func() {
		defer r.done.Done()
		seen := map[int64]*jobClock{}
		for {
			_ = r.tick(ctx, a, opts.Every, seen)
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
	id                                int64
	schedule, command, database, user string
}

// jobClock is what the runner keeps of a job between ticks.
type jobClock struct {
	schedule string
	parsed   cronSchedule
	valid    bool
	// considered is the latest minute whose start the runner has judged
	// (schedule mode), or the last run's start (with Every).
	considered time.Time
}

// due says whether job runs now, and moves its clock on.
func (c *jobClock) due(now time.Time, every time.Duration) bool {
	if every > 0 {
		if !c.considered.IsZero() && now.Sub(c.considered) < every {
			return false
		}
		c.considered = now
		return true
	}
	minute := now.UTC().Truncate(time.Minute)
	if !minute.After(c.considered) {
		return false
	}
	c.considered = minute
	return c.valid && c.parsed.matches(minute)
}

func (r *FakeCronRunner) tick(ctx context.Context, a *Aurora, every time.Duration, seen map[int64]*jobClock) error {
	conn, err := pgx.Connect(ctx, a.URL(""))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT jobid, schedule, command, database, username FROM cron.job WHERE active ORDER BY jobid`)
	if err != nil {
		return err
	}
	jobs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fakeJob, error) {
		var j fakeJob
		return j, row.Scan(&j.id, &j.schedule, &j.command, &j.database, &j.user)
	})
	if err != nil {
		return err
	}
	for _, j := range jobs {
		now := time.Now()
		c, ok := seen[j.id]
		if !ok {
			c = &jobClock{}
			if every == 0 {
				// A job first seen runs from the next minute on.
				c.considered = now.UTC().Truncate(time.Minute)
			}
			seen[j.id] = c
		}
		if c.schedule != j.schedule || !ok {
			c.schedule = j.schedule
			c.parsed, err = parseCronSchedule(j.schedule)
			c.valid = err == nil
		}
		if !c.due(now, every) {
			continue
		}
		status, message := "succeeded", ""
		if err := runAs(ctx, a, j); err != nil {
			status, message = "failed", err.Error()
		}
		if _, err := conn.Exec(ctx, `INSERT INTO cron.job_run_details (jobid, job_pid, database, username, command, status, return_message, start_time, end_time)
			VALUES ($1, pg_backend_pid(), $2, $3, $4, $5, $6, $7, clock_timestamp())`,
			j.id, j.database, j.user, j.command, status, message, now); err != nil {
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
