package dbsetup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestPurgeCheck: the check, logged in as the check user, reads the purge
// jobs' runs (the migrate user's) and the key table through the setup's
// function: healthy once a purge has run and left no expired key behind;
// not healthy with a key left behind, nor once a purge run fails; and its
// EMF line carries the metrics the template's alarm reads.
func TestPurgeCheck(t *testing.T) {
	ctx := context.Background()
	bin, env, err := pgtest.InstallPG16(ctx)
	require.NoError(t, err)
	a, err := pgtest.StartAurora(ctx, pgtest.AuroraOptions{Options: pgtest.Options{Dir: filepath.Join(t.TempDir(), "pg16"), Bin: bin, Env: env}, FakeCron: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Destroy() })
	runner := pgtest.StartFakeCron(a, pgtest.FakeCronOptions{Every: 300 * time.Millisecond})
	t.Cleanup(runner.Stop)
	_, err = dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)

	checker := pool(t, a.URLAs(cfg.CheckUser))
	super := pool(t, a.URL(""))
	checkUserIsLeastPrivileged(t, super, checker)
	// A server up for hours (the test's started a moment ago): the hourly
	// purge was due.
	upFor := func(d time.Duration) func(context.Context, pgx.Tx) (time.Time, error) {
		return func(context.Context, pgx.Tx) (time.Time, error) { return time.Now().Add(-d), nil }
	}
	check := &dbsetup.PurgeCheck{FunctionName: "ichido-MigrateFunction", UpSince: upFor(3 * time.Hour)}
	healthy := func() dbsetup.PurgeHealth {
		var h dbsetup.PurgeHealth
		require.Eventually(t, func() bool {
			h, err = check.Read(ctx, checker)
			require.NoError(t, err)
			return h.Healthy()
		}, 10*time.Second, 100*time.Millisecond, "the check finds the purge healthy: %+v", h)
		return h
	}
	h := healthy()
	require.Equal(t, int64(3), h.PurgeJobs)
	require.Positive(t, h.KeyTableBytes)

	// A key three hours past its expiry: the purge has not done its work.
	runner.Stop()
	_, err = super.Exec(ctx, `INSERT INTO idempotency_keys (key, user_id, request_hash, status, response_body, status_code, owner, created_at, expires_at)
		VALUES ('00000000-0000-4000-8000-000000000009', '7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f', 'h', 'completed', '{}', 200, 'check', now() - interval '4 hours', now() - interval '3 hours')`)
	require.NoError(t, err)
	h, err = check.Read(ctx, checker)
	require.NoError(t, err)
	require.Equal(t, int64(1), h.ExpiredKeys)
	require.Positive(t, h.PurgeRunsDue)
	require.False(t, h.Healthy())

	// The same table seen by a check that has just woken a paused cluster:
	// no purge was due while it was up, so none missed its key.
	resumed := *check
	resumed.UpSince = upFor(time.Minute)
	h, err = resumed.Read(ctx, checker)
	require.NoError(t, err)
	require.Zero(t, h.PurgeRunsDue)
	require.Zero(t, h.ExpiredKeys)
	require.True(t, h.Healthy(), "a paused cluster is not a broken purge: %+v", h)

	// The purge runs again and removes it.
	runner = pgtest.StartFakeCron(a, pgtest.FakeCronOptions{Every: 300 * time.Millisecond})
	t.Cleanup(runner.Stop)
	healthy()

	// A purge that fails (here its procedure is broken) is seen at once.
	_, err = super.Exec(ctx, `UPDATE cron.job SET command = 'CALL no_such_procedure()' WHERE jobname = 'purge-idempotency'`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		h, err = check.Read(ctx, checker)
		require.NoError(t, err)
		return h.PurgeRunsFailed > 0
	}, 10*time.Second, 100*time.Millisecond)
	require.False(t, h.Healthy())
	require.Contains(t, h.LastFailure, "no_such_procedure")

	var out bytes.Buffer
	h, err = check.Run(ctx, checker, &out)
	require.NoError(t, err)
	var line map[string]any
	require.NoError(t, json.Unmarshal(bytes.TrimSpace(out.Bytes()), &line), out.String())
	require.Equal(t, "ichido-MigrateFunction", line["FunctionName"])
	require.EqualValues(t, h.PurgeRunsFailed, line["PurgeRunsFailed"])
	require.EqualValues(t, false, line["healthy"])
	directive := line["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	require.Equal(t, dbsetup.Namespace, directive["Namespace"])
	require.Equal(t, []any{[]any{"FunctionName"}}, directive["Dimensions"])
	var names []string
	for _, m := range directive["Metrics"].([]any) {
		name := m.(map[string]any)["Name"].(string)
		names = append(names, name)
		require.Contains(t, line, name, "every metric has its value")
	}
	require.ElementsMatch(t, []string{"PurgeCheckRan", "PurgeJobs", "PurgeRunsSucceeded", "PurgeRunsFailed", "PurgeRunsDue", "KeyTableBytes", "ExpiredKeys"}, names)
	require.EqualValues(t, 1, line["PurgeCheckRan"], "the heartbeat")
	t.Logf("EMF: %s", bytes.TrimSpace(out.Bytes()))
}

// TestPurgeHealthRule: the alarm's rule, case by case. A run is needed only
// when one was due while the database was up.
func TestPurgeHealthRule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    dbsetup.PurgeHealth
		want bool
	}{
		{"a run due and done", dbsetup.PurgeHealth{PurgeJobs: 3, PurgeRunsDue: 2, PurgeRunsSucceeded: 2}, true},
		{"a run due, none done", dbsetup.PurgeHealth{PurgeJobs: 3, PurgeRunsDue: 1}, false},
		{"just resumed: nothing due", dbsetup.PurgeHealth{PurgeJobs: 3}, true},
		{"a failed run", dbsetup.PurgeHealth{PurgeJobs: 3, PurgeRunsDue: 1, PurgeRunsSucceeded: 1, PurgeRunsFailed: 1}, false},
		{"no job", dbsetup.PurgeHealth{PurgeRunsDue: 1, PurgeRunsSucceeded: 1}, false},
		{"a key left behind", dbsetup.PurgeHealth{PurgeJobs: 3, PurgeRunsDue: 1, PurgeRunsSucceeded: 1, ExpiredKeys: 1}, false},
	} {
		require.Equal(t, tc.want, tc.h.Healthy(), tc.name)
	}
}

// checkUserIsLeastPrivileged: the check user logs in with IAM only, belongs
// to no role but rds_iam, owns nothing, and may call the purge check's
// function and nothing else: no key, no task, no pg_cron table, no acting as
// the migrate user. No other user but the owner may call the function.
func checkUserIsLeastPrivileged(t *testing.T, super, checker *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var login, superuser, createrole, createdb, bypassRLS, noPassword bool
	require.NoError(t, super.QueryRow(ctx, `SELECT rolcanlogin, rolsuper, rolcreaterole, rolcreatedb, rolbypassrls, rolpassword IS NULL FROM pg_authid WHERE rolname = $1`,
		cfg.CheckUser).Scan(&login, &superuser, &createrole, &createdb, &bypassRLS, &noPassword))
	require.True(t, login && noPassword, "an IAM login")
	require.False(t, superuser || createrole || createdb || bypassRLS)
	var roles []string
	require.NoError(t, super.QueryRow(ctx, `SELECT coalesce(array_agg(g.rolname::text ORDER BY 1), '{}') FROM pg_auth_members m
		JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1`, cfg.CheckUser).Scan(&roles))
	require.Equal(t, []string{"rds_iam"}, roles)
	owned, err := dbsetup.Owned(ctx, super, cfg.CheckUser)
	require.NoError(t, err)
	require.Empty(t, owned)

	for _, q := range []string{
		`SELECT count(*) FROM idempotency_keys`,
		`SELECT count(*) FROM tasks`,
		`SELECT count(*) FROM cron.job`,
		`SELECT count(*) FROM cron.job_run_details`,
		`SET ROLE ` + cfg.MigrateUser,
		`CREATE TABLE mine (id int)`,
	} {
		_, err := checker.Exec(ctx, q)
		require.ErrorContains(t, err, "permission denied", "the check user may not: %s", q)
	}
	var n int
	require.NoError(t, checker.QueryRow(ctx, `SELECT count(*) FROM `+dbsetup.PurgeHealthFunction+`(3600, NULL, 1)`).Scan(&n))
	require.Equal(t, 1, n)
	var callers []string
	require.NoError(t, super.QueryRow(ctx, `SELECT array_agg(r.rolname::text ORDER BY 1) FROM pg_roles r
		WHERE has_function_privilege(r.oid, $1::regprocedure, 'EXECUTE') AND NOT r.rolsuper`,
		dbsetup.PurgeHealthFunction+"(double precision, timestamptz, bigint)").Scan(&callers))
	// The master user may act as the migrate user, for maintenance; on 16
	// without inheriting its privileges.
	require.ElementsMatch(t, []string{cfg.MigrateUser, cfg.CheckUser}, slices.DeleteFunc(callers, func(r string) bool { return r == cfg.MasterUser }),
		"only the owner and the check user call it")
}
