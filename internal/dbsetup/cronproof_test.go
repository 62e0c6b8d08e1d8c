package dbsetup_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestCronProofWithBackgroundWorkers: on the real pg_cron running jobs in
// background workers, the first setup schedules the probe, sees it run as
// the IAM-only migrate user and removes it; the next setup takes that run
// as proof and waits for nothing.
func TestCronProofWithBackgroundWorkers(t *testing.T) {
	ctx := context.Background()
	a, err := pgtest.StartAurora(ctx, pgtest.AuroraOptions{Options: pgtest.Options{Dir: filepath.Join(t.TempDir(), "pg15")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })

	sum, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.NotNil(t, sum.Cron)
	require.Equal(t, "probe", sum.Cron.Evidence)
	require.Equal(t, dbsetup.ProbeJob, sum.Cron.Job)
	t.Logf("pg_cron ran the probe as %s after %v", cfg.MigrateUser, sum.Cron.Waited)

	super := pool(t, a.URL(""))
	var probes, runs int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE jobname = $1`, dbsetup.ProbeJob).Scan(&probes))
	require.Zero(t, probes, "the probe is removed once it has run")
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM cron.job_run_details WHERE username = $1 AND status = 'succeeded'`, cfg.MigrateUser).Scan(&runs))
	require.Positive(t, runs)

	again, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Equal(t, "recent run", again.Cron.Evidence, "a recent successful run of the migrate user's is proof enough")
	require.Zero(t, again.Cron.Waited)

	// The check user, which pg_cron's row security shows nothing of its
	// own, reads the migrate user's purge jobs through the setup's function.
	h, err := (&dbsetup.PurgeCheck{}).Read(ctx, pool(t, a.URLAs(cfg.CheckUser)))
	require.NoError(t, err)
	require.Equal(t, int64(3), h.PurgeJobs)
	_, err = pool(t, a.URLAs(cfg.CheckUser)).Exec(ctx, `SELECT count(*) FROM cron.job`)
	require.ErrorContains(t, err, "permission denied")
}

// TestCronProofFailsOverClientSessions: where pg_cron runs jobs over client
// sessions that must log in with a password, the IAM-only migrate user's
// job fails, and so does the setup, saying what to change; the probe is
// removed all the same.
func TestCronProofFailsOverClientSessions(t *testing.T) {
	ctx := context.Background()
	a, err := pgtest.StartAuroraCronClientSessions(ctx, pgtest.AuroraOptions{Options: pgtest.Options{Dir: filepath.Join(t.TempDir(), "pg15")}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })

	sum, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.ErrorIs(t, err, dbsetup.ErrCronCannotRun)
	requireOperatorFix(t, err)
	require.NotEmpty(t, sum.Applied, "what came before stays")
	t.Logf("the setup's failure: %v", err)
	var probes int
	require.NoError(t, pool(t, a.URL("")).QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE jobname = $1`, dbsetup.ProbeJob).Scan(&probes))
	require.Zero(t, probes)
}

// TestCronProofTimesOut: a pg_cron that never runs the probe (here the
// stand-in with no runner) fails the setup once the wait is over.
func TestCronProofTimesOut(t *testing.T) {
	ctx := context.Background()
	bin, env, err := pgtest.InstallPG16(ctx)
	require.NoError(t, err)
	a, err := pgtest.StartAurora(ctx, pgtest.AuroraOptions{Options: pgtest.Options{Dir: filepath.Join(t.TempDir(), "pg16"), Bin: bin, Env: env}, FakeCron: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	c := cfg
	c.Cron = &dbsetup.CronConfig{ProbeTimeout: 3 * time.Second}
	_, err = dbsetup.Apply(ctx, connector(t, a.Cluster), c)
	require.ErrorIs(t, err, dbsetup.ErrCronCannotRun)
	require.ErrorContains(t, err, "did not run within 3s")
	requireOperatorFix(t, err)
}

// requireOperatorFix: the failure names what an operator can change (the
// parameter group's pg_cron settings, a reboot) and asks for no setting
// AWS does not let a user modify.
func requireOperatorFix(t *testing.T, err error) {
	t.Helper()
	for _, s := range []string{"shared_preload_libraries", "cron.database_name", "reboot"} {
		require.ErrorContains(t, err, s)
	}
	require.NotContains(t, err.Error(), "cron.use_background_workers = 1")
	require.NotContains(t, err.Error(), "set cron.use_background_workers")
}
