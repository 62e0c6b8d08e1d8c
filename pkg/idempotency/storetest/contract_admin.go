package storetest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
	t.Run("PrefixesAreExactBoundaries", func(t *testing.T) {
		t.Parallel()
		s.prefixBoundaries(t)
	})
}

// prefixTenant is one store of prefixBoundaries, with the record only it
// holds and its own record of the ids every tenant holds.
type prefixTenant struct {
	prefix      string
	st          idemstore.Store
	a           idemstore.Admin
	own, shared idemstore.Ref
}

// prefixBoundaries checks, on stores that share one server, that a key
// prefix is an exact boundary: a store on "svc-…" sees nothing of the
// store on "svc-…2" (whose prefix starts with its own) nor of the store on
// the default prefix, and the other way round, by List, Get, Delete, or any
// write, even with ids made to spell another store's key.
func (s suite) prefixBoundaries(t *testing.T) {
	if s.opts.NewWithPrefix == nil {
		t.Skip("Config.NewWithPrefix is not set")
	}
	ctx := context.Background()
	stem := "svc-" + uuid.NewString()[:8]
	sharedUser, sharedKey := uuid.NewString(), uuid.NewString()
	var tenants []*prefixTenant
	for _, prefix := range []string{stem, stem + "2", ""} {
		st := s.opts.NewWithPrefix(t, prefix)
		a, ok := st.(idemstore.Admin)
		if !ok {
			t.Skip("the Store does not implement idemstore.Admin")
		}
		tn := &prefixTenant{prefix: prefix, st: st, a: a, own: newRef(),
			shared: idemstore.Ref{UserID: sharedUser, Key: sharedKey, Owner: "owner-" + uuid.NewString()}}
		mustClaim(t, st, claimAt(tn.own, hash("own"), base))
		c := claimAt(tn.shared, hash("shared"), base)
		requireOwnedInProgress(t, c, mustClaim(t, st, c))
		tenants = append(tenants, tn)
	}

	for _, tn := range tenants {
		others := func(yield func(*prefixTenant) bool) {
			for _, o := range tenants {
				if o != tn && !yield(o) {
					return
				}
			}
		}
		recs, err := tn.a.List(ctx, idemstore.ListQuery{Limit: 100000})
		require.NoError(t, err, "prefix %q", tn.prefix)
		var ownSeen, sharedSeen int
		for _, r := range recs {
			for o := range others {
				require.NotEqual(t, o.own.Key, r.Key, "the store on prefix %q lists the record of prefix %q", tn.prefix, o.prefix)
			}
			switch r.Key {
			case tn.own.Key:
				ownSeen++
			case sharedKey:
				sharedSeen++
				require.Equal(t, tn.shared.Owner, r.Owner, "the store on prefix %q lists another prefix's record of the shared ids", tn.prefix)
			}
		}
		if tn.prefix != "" {
			// The stem is the test's own: its store lists the two records
			// written here and nothing else, however another prefix's
			// bytes would read.
			require.Len(t, recs, 2, "the store on prefix %q lists records that are not its own: a prefix is matched exactly, never as the start of a longer prefix (%q)", tn.prefix, tn.prefix+"2")
		}
		require.Equal(t, 1, ownSeen, "the store on prefix %q lists its own record once", tn.prefix)
		require.Equal(t, 1, sharedSeen, "the store on prefix %q lists its record of the shared ids once", tn.prefix)

		recs, err = tn.a.List(ctx, idemstore.ListQuery{UserID: sharedUser})
		require.NoError(t, err)
		require.Len(t, recs, 1, "the store on prefix %q lists the shared user's records of its prefix alone", tn.prefix)
		require.Equal(t, tn.shared.Owner, recs[0].Owner)

		rec, found, err := tn.a.Get(ctx, sharedUser, sharedKey)
		require.NoError(t, err)
		require.True(t, found)
		require.Equal(t, tn.shared.Owner, rec.Owner, "the store on prefix %q gets another prefix's record", tn.prefix)

		for o := range others {
			recs, err := tn.a.List(ctx, idemstore.ListQuery{UserID: o.own.UserID})
			require.NoError(t, err)
			require.Empty(t, recs, "the store on prefix %q lists the user of prefix %q", tn.prefix, o.prefix)
			_, found, err := tn.a.Get(ctx, o.own.UserID, o.own.Key)
			require.NoError(t, err)
			require.False(t, found, "the store on prefix %q gets the record of prefix %q", tn.prefix, o.prefix)

			// Ids that spell the other store's key after this store's
			// prefix (its prefix's rest, then its user) must not reach it.
			rest, ok := strings.CutPrefix(o.prefix, tn.prefix)
			if !ok {
				continue
			}
			forged := idemstore.Ref{UserID: rest + o.own.UserID, Key: o.own.Key, Owner: o.own.Owner}
			s.requireForgedRefused(t, tn, o, forged)
		}
	}

	// Deleting one store's record of the shared ids leaves the others'.
	first := tenants[0]
	deleted, err := first.a.Delete(ctx, sharedUser, sharedKey)
	require.NoError(t, err)
	require.True(t, deleted)
	for _, o := range tenants[1:] {
		rec, found, err := o.a.Get(ctx, sharedUser, sharedKey)
		require.NoError(t, err)
		require.True(t, found, "deleting on prefix %q deleted the record of prefix %q", first.prefix, o.prefix)
		require.Equal(t, o.shared.Owner, rec.Owner)
	}
}

// requireForgedRefused checks that no call of tn's store with the forged
// ids reaches o's record: each either fails or finds nothing, and o's
// record is as it was.
func (s suite) requireForgedRefused(t *testing.T, tn, o *prefixTenant, forged idemstore.Ref) {
	t.Helper()
	ctx := context.Background()
	what := func(call string) string {
		return fmt.Sprintf("%s on prefix %q with user %q reached the record of prefix %q", call, tn.prefix, forged.UserID, o.prefix)
	}
	if rec, found, err := tn.a.Get(ctx, forged.UserID, forged.Key); err == nil && found {
		require.NotEqual(t, o.own.Owner, rec.Owner, what("Get"))
	}
	recs, err := tn.a.List(ctx, idemstore.ListQuery{UserID: forged.UserID})
	if err == nil {
		for _, r := range recs {
			require.NotEqual(t, o.own.Key, r.Key, what("List"))
		}
	}
	claim := claimAt(withOwner(forged), hash("forged"), base)
	if res, err := tn.st.Claim(ctx, claim); err == nil {
		require.True(t, res.Claimed, what("Claim"))
		require.NotEqual(t, o.own.Owner, res.Record.Owner, what("Claim"))
		require.NoError(t, tn.st.Release(ctx, claim.Ref))
	}
	require.Error(t, tn.st.Renew(ctx, renewalAt(forged, base, base.Add(time.Hour))), what("Renew"))
	require.Error(t, tn.st.Complete(ctx, completionAt(forged, jsonResponse, base)), what("Complete"))
	require.Error(t, tn.st.Release(ctx, forged), what("Release"))
	if deleted, err := tn.a.Delete(ctx, forged.UserID, forged.Key); err == nil {
		require.False(t, deleted, what("Delete"))
	}

	rec, found, err := o.a.Get(ctx, o.own.UserID, o.own.Key)
	require.NoError(t, err)
	require.True(t, found, "the record of prefix %q is gone after calls on prefix %q", o.prefix, tn.prefix)
	require.Equal(t, o.own.Owner, rec.Owner)
	require.Equal(t, idemstore.StatusInProgress, rec.Status)
	requireTime(t, base.Add(lease), rec.LeaseUntil, "the lease of prefix "+strconv.Quote(o.prefix)+"'s record")
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
