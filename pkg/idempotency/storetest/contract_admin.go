package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/stretchr/testify/require"
)

// runAdminCases checks the optional idemstore.Admin capability, on a
// Store that implements it; the cases are skipped on one that does not.
func runAdminCases(t *testing.T, s suite) {
	cases := []struct {
		name string
		run  func(t *testing.T, st idemstore.Store, a idemstore.Admin)
	}{
		{"AdminGetsInProgressAndCompleted", s.adminGet},
		{"AdminListsByUserAndStatusNewestFirst", s.adminList},
		{"AdminDeleteFreesKey", s.adminDelete},
		{"AdminSkipsExpiredRecords", s.adminExpired},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			st := s.newStore(t)
			a, ok := st.(idemstore.Admin)
			if !ok {
				t.Skip("the Store does not implement idemstore.Admin")
			}
			c.run(t, st, a)
		})
	}
}

func (s suite) adminGet(t *testing.T, st idemstore.Store, a idemstore.Admin) {
	ctx := context.Background()
	ref := newRef()
	_, found, err := a.Get(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.False(t, found, "no record yet")

	c := claimAt(ref, hash("a"), base)
	mustClaim(t, st, c)
	rec, found, err := a.Get(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, ref.UserID, rec.UserID)
	require.Equal(t, ref.Key, rec.Key)
	require.Equal(t, ref.Owner, rec.Owner)
	require.Equal(t, c.Fingerprint, rec.Fingerprint)
	require.Equal(t, idemstore.StatusInProgress, rec.Status)
	require.Nil(t, rec.Response)
	requireTime(t, c.Now, rec.CreatedAt, "CreatedAt")
	requireTime(t, c.LeaseUntil, rec.LeaseUntil, "LeaseUntil")
	requireTime(t, c.ExpiresAt, rec.ExpiresAt, "ExpiresAt")

	done := completionAt(ref, jsonResponse, base.Add(time.Second))
	require.NoError(t, st.Complete(ctx, done))
	rec, found, err = a.Get(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	requireResponse(t, jsonResponse, rec.Response)
	requireTime(t, c.Now, rec.CreatedAt, "CreatedAt")
	requireTime(t, done.ExpiresAt, rec.ExpiresAt, "ExpiresAt after completion")
}

func (s suite) adminList(t *testing.T, st idemstore.Store, a idemstore.Admin) {
	ctx := context.Background()
	user, other := uuid.NewString(), uuid.NewString()
	older := idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: "owner-1"}
	newer := idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: "owner-2"}
	elsewhere := idemstore.Ref{UserID: other, Key: uuid.NewString(), Owner: "owner-3"}
	mustClaim(t, st, claimAt(older, hash("a"), base))
	require.NoError(t, st.Complete(ctx, completionAt(older, jsonResponse, base.Add(time.Second))))
	mustClaim(t, st, claimAt(newer, hash("b"), base.Add(2*time.Second)))
	mustClaim(t, st, claimAt(elsewhere, hash("c"), base.Add(3*time.Second)))

	keys := func(recs []idemstore.Record) []string {
		var out []string
		for _, r := range recs {
			require.Equal(t, user, r.UserID)
			out = append(out, r.Key)
		}
		return out
	}
	recs, err := a.List(ctx, idemstore.ListQuery{UserID: user})
	require.NoError(t, err)
	require.Equal(t, []string{newer.Key, older.Key}, keys(recs), "one user's records, newest first")
	requireResponse(t, jsonResponse, recs[1].Response)

	recs, err = a.List(ctx, idemstore.ListQuery{UserID: user, Status: idemstore.StatusInProgress})
	require.NoError(t, err)
	require.Equal(t, []string{newer.Key}, keys(recs))
	recs, err = a.List(ctx, idemstore.ListQuery{UserID: user, Status: idemstore.StatusCompleted})
	require.NoError(t, err)
	require.Equal(t, []string{older.Key}, keys(recs))
	recs, err = a.List(ctx, idemstore.ListQuery{UserID: user, Limit: 1})
	require.NoError(t, err)
	require.Equal(t, []string{newer.Key}, keys(recs), "the limit keeps the newest")

	// Without a user, every user's records (of this store, which other
	// cases may share) are listed; ours are among them.
	recs, err = a.List(ctx, idemstore.ListQuery{Status: idemstore.StatusInProgress, Limit: 100000})
	require.NoError(t, err)
	var seen []string
	for _, r := range recs {
		require.Equal(t, idemstore.StatusInProgress, r.Status)
		seen = append(seen, r.Key)
	}
	require.Contains(t, seen, newer.Key)
	require.Contains(t, seen, elsewhere.Key)
	require.NotContains(t, seen, older.Key)
}

func (s suite) adminDelete(t *testing.T, st idemstore.Store, a idemstore.Admin) {
	ctx := context.Background()
	ref := newRef()
	mustClaim(t, st, claimAt(ref, hash("a"), base))
	deleted, err := a.Delete(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.True(t, deleted)
	_, found, err := a.Get(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.False(t, found)
	deleted, err = a.Delete(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.False(t, deleted, "nothing left to delete")
	require.ErrorIs(t, st.Complete(ctx, completionAt(ref, jsonResponse, base)), idemstore.ErrLeaseLost,
		"the deleted record's owner stores nothing")
	// The key is free: another owner claims it.
	again := claimAt(withOwner(ref), hash("b"), base)
	requireOwnedInProgress(t, again, mustClaim(t, st, again))
}

func (s suite) adminExpired(t *testing.T, st idemstore.Store, a idemstore.Admin) {
	ctx := context.Background()
	// A record that expired a minute ago by every clock: the real one and
	// the server's.
	now := time.Now().Truncate(time.Millisecond).UTC()
	expired := newRef()
	c := claimAt(expired, hash("a"), now.Add(-2*time.Hour))
	c.LeaseUntil, c.ExpiresAt = now.Add(-time.Hour-time.Minute), now.Add(-time.Minute)
	mustClaim(t, st, c)
	live := idemstore.Ref{UserID: expired.UserID, Key: uuid.NewString(), Owner: "owner-live"}
	mustClaim(t, st, claimAt(live, hash("b"), now))

	_, found, err := a.Get(ctx, expired.UserID, expired.Key)
	require.NoError(t, err)
	require.False(t, found, "an expired record counts as absent")
	recs, err := a.List(ctx, idemstore.ListQuery{UserID: expired.UserID})
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, live.Key, recs[0].Key)
}
