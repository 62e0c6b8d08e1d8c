package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestCompleteInTx checks that a completion inside the handler's own
// transaction commits and rolls back together with the handler's writes.
func TestCompleteInTx(t *testing.T) {
	t.Parallel()
	db := testDB(t)
	st, err := pgstore.New(db, nil)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = db.Exec(ctx, `CREATE TABLE work (key text PRIMARY KEY)`)
	require.NoError(t, err)
	now := time.Now().Add(-time.Hour).Truncate(time.Millisecond) // a lease can run out by both clocks
	resp := idemstore.Response{StatusCode: 201, Body: `{"done":true}`}

	claim := func(owner string) idemstore.Claim {
		c := idemstore.Claim{Ref: idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: owner},
			Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
		res, err := st.Claim(ctx, c)
		require.NoError(t, err)
		require.True(t, res.Claimed)
		return c
	}
	// work does the handler's write and the completion in one transaction.
	work := func(c idemstore.Claim, commit bool) error {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(ctx) }()
		_, err = tx.Exec(ctx, `INSERT INTO work VALUES ($1)`, c.Key)
		require.NoError(t, err)
		if err := st.CompleteInTx(ctx, tx, idemstore.Completion{Ref: c.Ref, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)}); err != nil {
			return err
		}
		if commit {
			return tx.Commit(ctx)
		}
		return tx.Rollback(ctx)
	}
	state := func(c idemstore.Claim) (idemstore.Record, bool) {
		res, err := st.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: c.UserID, Key: c.Key, Owner: "observer"},
			Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.False(t, res.Claimed)
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM work WHERE key = $1`, c.Key).Scan(&n))
		return res.Record, n == 1
	}

	committed := claim("a")
	require.NoError(t, work(committed, true))
	rec, written := state(committed)
	require.True(t, written)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.Equal(t, resp.Body, rec.Response.Body)

	rolledBack := claim("b")
	require.NoError(t, work(rolledBack, false))
	rec, written = state(rolledBack)
	require.False(t, written)
	require.Equal(t, idemstore.StatusInProgress, rec.Status, "the key stays with its owner, which may still release it")
	require.NoError(t, st.Release(ctx, rolledBack.Ref))

	// A worker whose lease was taken over learns it before committing.
	lost := claim("c")
	takeover := lost
	takeover.Owner, takeover.Now = "d", lost.LeaseUntil
	res, err := st.Claim(ctx, takeover)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.ErrorIs(t, work(lost, true), idemstore.ErrLeaseLost)
	_, written = state(lost)
	require.False(t, written, "the lost worker rolled its work back")
}
