package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestPrefixIsABoundary puts stores on prefixes that a looser match would
// mix up on one server: one that extends another with a hash tag of its own
// ("svc:{eu}:" after "svc:"), which SCAN's "svc:{*:*}" would match and a
// user id of "eu}" would address, and ones holding SCAN's glob
// metacharacters ("[ab]", "*", "?"), which would match "svca:" unescaped.
// Keys that are not a user and a key under a prefix are skipped by List.
// Each store lists, gets and deletes its own records alone.
func TestPrefixIsABoundary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.NewClient(t)
	stem := "pfx-" + uuid.NewString()[:8]
	prefixes := []string{stem + ":", stem + ":{eu}:", stem + "[ab]:", stem + "a:", stem + "*:", stem + "?:"}
	for _, foreign := range []string{stem + ":{not-a-user:not-a-key}", stem + ":{" + uuid.NewString() + "}", stem + ":{" + uuid.NewString() + ":" + uuid.NewString() + "}"} {
		require.NoError(t, client.Set(ctx, foreign, "not a record", time.Hour).Err())
	}
	now := time.Now()
	type tenant struct {
		prefix string
		st     *redisstore.Store
		ref    idemstore.Ref
	}
	var tenants []tenant
	for _, prefix := range prefixes {
		tn := tenant{prefix, must.Value(redisstore.New(client, &redisstore.Options{KeyPrefix: prefix})), newRef()}
		_, err := tn.st.Claim(ctx, claimAt(tn.ref, now, time.Minute, time.Hour))
		require.NoError(t, err)
		tenants = append(tenants, tn)
	}
	for _, tn := range tenants {
		recs, err := tn.st.List(ctx, idemstore.ListQuery{})
		require.NoError(t, err)
		require.Len(t, recs, 1, "the store on %q lists its own record alone", tn.prefix)
		require.Equal(t, tn.ref.Key, recs[0].Key)
		require.Equal(t, tn.ref.Owner, recs[0].Owner)
	}

	// "svc:" + "{" + user + ":" + key + "}" spells the key of the record of
	// "svc:{eu}:" when the user is "eu}" and the key "{user:key".
	svc, eu := tenants[0], tenants[1]
	forged := idemstore.Ref{UserID: "eu}", Key: "{" + eu.ref.UserID + ":" + eu.ref.Key, Owner: eu.ref.Owner}
	require.Equal(t, eu.st.Key(eu.ref.UserID, eu.ref.Key), svc.st.Key(forged.UserID, forged.Key))
	_, found, err := svc.st.Get(ctx, forged.UserID, forged.Key)
	require.False(t, err == nil && found, "Get on %q reached the record of %q", svc.prefix, eu.prefix)
	deleted, err := svc.st.Delete(ctx, forged.UserID, forged.Key)
	require.False(t, err == nil && deleted, "Delete on %q deleted the record of %q", svc.prefix, eu.prefix)
	require.Error(t, svc.st.Release(ctx, forged))
	require.Error(t, svc.st.Complete(ctx, idemstore.Completion{Ref: forged, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	require.Error(t, svc.st.Renew(ctx, idemstore.Renewal{Ref: forged, Now: now, LeaseUntil: now.Add(time.Hour)}))
	rec, found, err := eu.st.Get(ctx, eu.ref.UserID, eu.ref.Key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, idemstore.StatusInProgress, rec.Status)
	require.Equal(t, eu.ref.Owner, rec.Owner)
}

// TestIDsMustBeUUIDs: the ids are what makes the prefix a boundary, so a
// call with an id that is not a lower-case UUID is refused, as a
// permanent store error, before anything is sent.
func TestIDsMustBeUUIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := must.Value(redisstore.New(redistest.NewClient(t), nil))
	good := uuid.NewString()
	for name, ref := range map[string]idemstore.Ref{
		"user with a brace":  {UserID: "eu}", Key: good, Owner: "o"},
		"user in upper case": {UserID: "A" + good[1:], Key: good, Owner: "o"},
		"user empty":         {UserID: "", Key: good, Owner: "o"},
		"key with a colon":   {UserID: good, Key: good + ":" + good, Owner: "o"},
		"key not a UUID":     {UserID: good, Key: "abc", Owner: "o"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			now := time.Now()
			_, err := st.Claim(ctx, claimAt(ref, now, time.Minute, time.Hour))
			requireRefused(t, err, "claim")
			requireRefused(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(time.Hour)}), "complete")
			requireRefused(t, st.Release(ctx, ref), "release")
			requireRefused(t, st.Renew(ctx, idemstore.Renewal{Ref: ref, Now: now, LeaseUntil: now.Add(time.Minute)}), "renew")
			_, _, err = st.Get(ctx, ref.UserID, ref.Key)
			requireRefused(t, err, "get")
			_, err = st.Delete(ctx, ref.UserID, ref.Key)
			requireRefused(t, err, "delete")
			if ref.UserID != "" && ref.UserID != good {
				_, err = st.List(ctx, idemstore.ListQuery{UserID: ref.UserID})
				requireRefused(t, err, "list")
			}
		})
	}
}

// requireRefused checks that err is the permanent store error of op that
// refuses an id.
func requireRefused(t *testing.T, err error, op string) {
	t.Helper()
	se := requireStoreError(t, err, op)
	require.True(t, se.Permanent, "%v", err)
	require.ErrorContains(t, err, "not a lower-case UUID")
}
