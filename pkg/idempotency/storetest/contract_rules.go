package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// The cases of this file check the rules a store author is most likely
// to get wrong, each with a message that names the rule.

// clockMessage opens the failure of a store that decides expiry on its
// own clock alone.
const clockMessage = "the store decides expiry on its own clock: it must decide takeover and expiry against the earlier of the caller's clock (Claim.Now) and its server's, and the suite's clock runs an hour behind the real time"

// requireCallersClock fails t, naming the clock rule, when st takes over a
// lease that is live by the caller's clock but ran out by the real time.
func requireCallersClock(t *testing.T, st idemstore.Store) {
	t.Helper()
	first := claimAt(newRef(), hash("clock"), base)
	if _, err := st.Claim(context.Background(), first); err != nil {
		t.Fatalf("storetest: the clock probe's claim failed: %v", err)
	}
	second := claimAt(withOwner(first.Ref), hash("clock"), base.Add(time.Second))
	res, err := st.Claim(context.Background(), second)
	if err != nil {
		t.Fatalf("storetest: the clock probe's second claim failed: %v", err)
	}
	if res.Claimed {
		t.Fatalf("%s: a lease live until %s by the caller's clock was taken over at %s (caller's clock)",
			clockMessage, first.LeaseUntil.Format(time.RFC3339), second.Now.Format(time.RFC3339))
	}
}

// expiryOnTheCallersClock is the clock rule as a case of its own.
func (s suite) expiryOnTheCallersClock(t *testing.T) {
	requireCallersClock(t, s.newStore(t))
}

// completeAfterLeaseRanOut: the owner of a record whose lease ran out, and
// that no one took over, still completes it. The lease decides takeover,
// never the owner's own completion.
func (s suite) completeAfterLeaseRanOut(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("late"), base)
	requireOwnedInProgress(t, c, mustClaim(t, st, c))
	late := completionAt(c.Ref, jsonResponse, c.LeaseUntil.Add(time.Minute))
	require.NoError(t, st.Complete(context.Background(), late),
		"Complete must succeed while the caller's owner token still holds the record in progress, even after its lease ran out: only a takeover ends the owner's right to complete")
	res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("late"), late.Now.Add(time.Second)))
	require.False(t, res.Claimed, "the completed record is kept")
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status, "the late completion is the record's")
	requireResponse(t, jsonResponse, res.Record.Response)
}

// idsAreChecked: every call with a user id or key that is not a lower-case
// UUID fails with a permanent *idemstore.Error that wraps
// idemstore.ErrNotID, and writes nothing.
func (s suite) idsAreChecked(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	good := uuid.NewString()
	for _, bad := range []string{"not-a-uuid", strings.ToUpper(uuid.NewString()), "", good + "x"} {
		for _, ids := range [][2]string{{bad, good}, {good, bad}} {
			ref := idemstore.Ref{UserID: ids[0], Key: ids[1], Owner: "owner-" + uuid.NewString()}
			requireNotID := func(err error, op string) {
				t.Helper()
				require.ErrorIs(t, err, idemstore.ErrNotID, "%s with user id %q and key %q: a store refuses ids that are not lower-case UUIDs (idemstore.CheckIDs)", op, ref.UserID, ref.Key)
				require.True(t, idemstore.IsPermanent(err), "%s with user id %q and key %q: ErrNotID is permanent, since no retry can cure it: %v", op, ref.UserID, ref.Key, err)
			}
			_, err := st.Claim(ctx, claimAt(ref, hash("id"), base))
			requireNotID(err, "Claim")
			requireNotID(st.Complete(ctx, completionAt(ref, jsonResponse, base)), "Complete")
			requireNotID(st.Release(ctx, ref), "Release")
			requireNotID(st.Renew(ctx, renewalAt(ref, base, base.Add(lease))), "Renew")
			if a, ok := st.(idemstore.Admin); ok {
				_, _, err := a.Get(ctx, ref.UserID, ref.Key)
				requireNotID(err, "Get")
				_, err = a.Delete(ctx, ref.UserID, ref.Key)
				requireNotID(err, "Delete")
			}
		}
	}
	if a, ok := st.(idemstore.Admin); ok {
		_, err := a.List(ctx, idemstore.ListQuery{UserID: "not-a-uuid"})
		require.ErrorIs(t, err, idemstore.ErrNotID, "List with a user id that is not a lower-case UUID")
		require.True(t, idemstore.IsPermanent(err), "List: ErrNotID is permanent: %v", err)
	}
}

// timesToTheMicrosecond: a record keeps its times to the microsecond.
func (s suite) timesToTheMicrosecond(t *testing.T) {
	st := s.newStore(t)
	now := base.Add(time.Millisecond + 234*time.Microsecond)
	c := claimAt(newRef(), hash("µs"), now)
	c.LeaseUntil, c.ExpiresAt = now.Add(lease+567*time.Microsecond), now.Add(ttl+891*time.Microsecond)
	res := mustClaim(t, st, c)
	msg := "a store keeps a record's times to the microsecond: %s is %s, stored as %s"
	require.True(t, c.Now.Equal(res.Record.CreatedAt), msg, "CreatedAt", c.Now, res.Record.CreatedAt)
	require.True(t, c.LeaseUntil.Equal(res.Record.LeaseUntil), msg, "LeaseUntil", c.LeaseUntil, res.Record.LeaseUntil)
	require.True(t, c.ExpiresAt.Equal(res.Record.ExpiresAt), msg, "ExpiresAt", c.ExpiresAt, res.Record.ExpiresAt)
	got := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("µs"), now.Add(time.Second)))
	requireTimeIfSet(t, c.Now, got.Record.CreatedAt, "CreatedAt read back, to the microsecond")
	requireTimeIfSet(t, c.LeaseUntil, got.Record.LeaseUntil, "LeaseUntil read back, to the microsecond")
	requireTimeIfSet(t, c.ExpiresAt, got.Record.ExpiresAt, "ExpiresAt read back, to the microsecond")
	if a, ok := st.(idemstore.Admin); ok {
		rec, found, err := a.Get(context.Background(), c.UserID, c.Key)
		require.NoError(t, err)
		require.True(t, found)
		require.True(t, c.Now.Equal(rec.CreatedAt), msg, "CreatedAt (Get)", c.Now, rec.CreatedAt)
		require.True(t, c.LeaseUntil.Equal(rec.LeaseUntil), msg, "LeaseUntil (Get)", c.LeaseUntil, rec.LeaseUntil)
		require.True(t, c.ExpiresAt.Equal(rec.ExpiresAt), msg, "ExpiresAt (Get)", c.ExpiresAt, rec.ExpiresAt)
	}
}
