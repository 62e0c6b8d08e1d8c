package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestServerGone runs a store on a cluster of its own, stops the server
// abruptly, and checks that every method then fails with a *idemstore.Error.
func TestServerGone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cluster, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: t.TempDir() + "/data"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cluster.Destroy() })
	pool := newPool(t, cluster.URL("")+"&connect_timeout=5", nil)
	err = migrateStore(ctx, pool)
	require.NoError(t, err)

	st := must.Value(pgstore.New(pool, nil))
	now := time.Now()
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
	claim := idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	res, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.True(t, res.Claimed)

	require.NoError(t, cluster.Stop(ctx, "immediate"))

	requireStoreError := func(err error, op string) {
		t.Helper()
		var se *idemstore.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, op, se.Op)
		require.NotErrorIs(t, err, idemstore.ErrLeaseLost)
	}
	_, err = st.Claim(ctx, claim)
	requireStoreError(err, "claim")
	requireStoreError(st.Complete(ctx, idemstore.Completion{Ref: ref, Now: now, ExpiresAt: now.Add(time.Hour),
		Response: idemstore.Response{StatusCode: 200}}), "complete")
	requireStoreError(st.Release(ctx, ref), "release")
}

// TestPurgeOfStoreRecords lets the purge procedure of the migrations loose on
// records the store wrote: it removes exactly the expired ones, in bounded
// batches, leaves the live ones, and skips a row that a claim holds locked.
func TestPurgeOfStoreRecords(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))
	ctx := context.Background()
	// The purge compares with the server's clock, so these times are real.
	now := time.Now()
	user := uuid.NewString()
	write := func(expiresAt time.Time, complete bool) idemstore.Ref {
		ref := idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: "o"}
		created := expiresAt.Add(-24 * time.Hour)
		res, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: created, LeaseUntil: created.Add(time.Minute), ExpiresAt: expiresAt})
		require.NoError(t, err)
		require.True(t, res.Claimed)
		if complete {
			require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Now: created, ExpiresAt: expiresAt,
				Response: idemstore.Response{StatusCode: 201, Body: "{}"}}))
		}
		return ref
	}
	var expired, live []idemstore.Ref
	for i := range 25 {
		expired = append(expired, write(now.Add(-time.Hour-time.Duration(i)*time.Second), i%3 != 0))
	}
	for i := range 5 {
		live = append(live, write(now.Add(time.Hour), i%2 == 0))
	}
	count := func(refs []idemstore.Ref) int {
		keys := make([]string, len(refs))
		for i, r := range refs {
			keys[i] = r.Key
		}
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE user_id = $1 AND key = ANY($2)`, user, keys).Scan(&n))
		return n
	}

	// Two batches of ten at most: five expired rows are left for the next run.
	_, err := db.Pool.Exec(ctx, "CALL purge_expired_idempotency_keys(10, 2)")
	require.NoError(t, err)
	require.Equal(t, 5, count(expired))
	require.Equal(t, 5, count(live))

	// A row locked by a transaction (as a takeover claim locks it) is skipped.
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	var lockedKey string
	require.NoError(t, tx.QueryRow(ctx, `SELECT key FROM idempotency_keys WHERE user_id = $1 AND expires_at < now() LIMIT 1 FOR UPDATE`, user).Scan(&lockedKey))
	_, err = db.Pool.Exec(ctx, "CALL purge_expired_idempotency_keys(10, 100)")
	require.NoError(t, err)
	require.Equal(t, 1, count(expired), "only the locked expired row is left")
	require.Equal(t, 5, count(live))
	require.NoError(t, tx.Rollback(ctx))

	_, err = db.Pool.Exec(ctx, "CALL purge_expired_idempotency_keys()")
	require.NoError(t, err)
	require.Zero(t, count(expired))
	require.Equal(t, 5, count(live), "live records are never purged")

	// The purged keys are free again; the live ones still replay or stay in progress.
	res, err := st.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: expired[0].Key, Owner: "new"}, Fingerprint: "h2", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Claimed)
	res, err = st.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: live[0].Key, Owner: "new"}, Fingerprint: "h2", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
}
