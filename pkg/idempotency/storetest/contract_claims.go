package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// runContract runs the contract's cases, then the engine's races and
// failures through idempotency.Wrap, then Admin's cases when the store has
// it.
func runContract(t *testing.T, cfg Config) {
	s := suite{newStore: cfg.New, opts: cfg}
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"ClaimFreshKey", s.claimFreshKey},
		{"ExpiryOnTheCallersClock", s.expiryOnTheCallersClock},
		{"CompleteAfterLeaseRanOutBeforeTakeover", s.completeAfterLeaseRanOut},
		{"IDsAreCheckedAndNotIDIsPermanent", s.idsAreChecked},
		{"TimesKeptToTheMicrosecond", s.timesToTheMicrosecond},
		{"ConflictReturnsExistingRecord", s.conflictReturnsExistingRecord},
		{"RepeatedClaimBySameOwner", s.repeatedClaimBySameOwner},
		{"RepeatedClaimBySameOwnerOtherRequest", s.repeatedClaimOtherRequest},
		{"CallerClockAheadCannotTakeOver", s.callerAhead},
		{"CallerClockBehindOnlyDelaysTakeover", s.callerBehind},
		{"CompletedRecordReplaysByteForByte", s.completedRecordReplays},
		{"TakeoverAfterLeaseExpiry", s.takeoverAfterLeaseExpiry},
		{"TakeoverAfterExpiresAt", s.takeoverAfterExpiresAt},
		{"CompleteAfterLostLeaseWritesNothing", s.completeAfterLostLease},
		{"CompleteWithoutRecord", s.completeWithoutRecord},
		{"CompleteTwiceKeepsFirstResponse", s.completeTwice},
		{"ReleaseByNonOwnerDeletesNothing", s.releaseByNonOwner},
		{"ReleaseByOwnerFreesKey", s.releaseByOwner},
		{"ReleaseOfCompletedRecordDeletesNothing", s.releaseOfCompleted},
		{"RenewMovesTheLease", s.renewMovesLease},
		{"RenewPastExpiresAtKeepsTheRecord", s.renewPastExpiresAt},
		{"RenewAfterLeaseRanOutBeforeTakeover", s.renewAfterLeaseRanOut},
		{"RenewAfterTakeoverWritesNothing", s.renewAfterTakeover},
		{"RenewByNonOwnerWritesNothing", s.renewByNonOwner},
		{"RenewOfCompletedOrMissingRecord", s.renewOfCompletedOrMissing},
		{"PerUserIsolation", s.perUserIsolation},
		{"ConcurrentClaimsOneWinner", s.concurrentClaims},
		{"ConcurrentTakeoverOneWinner", s.concurrentTakeover},
		{"CancelledContext", s.cancelledContext},
		{"BrokenStore", s.brokenStore},
		{"NotKeptMarkerIsKept", s.notKeptMarker},
		{"OriginComesBackWithItsRecord", s.originKept},
		{"TooLargeResponseWritesNothing", s.tooLarge},
		{"MisconfiguredStoreIsPermanent", s.misconfigured},
		{"CheckStore", s.checkStore},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
	runDecoratorCases(t, s)
	runAdminCases(t, s)
}

type suite struct {
	newStore func(t *testing.T) idemstore.Store
	opts     Config
}

// base is the suite's clock origin, an hour before the real time; see the
// package comment.
var base = time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC()

const (
	lease = 30 * time.Second
	ttl   = 24 * time.Hour
)

func newRef() idemstore.Ref {
	return idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "owner-" + uuid.NewString()}
}

// withOwner returns r held by another owner token.
func withOwner(r idemstore.Ref) idemstore.Ref {
	r.Owner = "owner-" + uuid.NewString()
	return r
}

func hash(s string) string { return fmt.Sprintf("%064x", []byte(s)) }

// claimAt is the claim an invocation starting at now makes.
func claimAt(r idemstore.Ref, requestHash string, now time.Time) idemstore.Claim {
	return idemstore.Claim{Ref: r, Fingerprint: requestHash, Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

func completionAt(r idemstore.Ref, resp idemstore.Response, now time.Time) idemstore.Completion {
	return idemstore.Completion{Ref: r, Response: resp, Now: now, ExpiresAt: now.Add(ttl)}
}

func renewalAt(r idemstore.Ref, now, until time.Time) idemstore.Renewal {
	return idemstore.Renewal{Ref: r, Now: now, LeaseUntil: until}
}

func mustClaim(t *testing.T, st idemstore.Store, c idemstore.Claim) idemstore.ClaimResult {
	t.Helper()
	res, err := st.Claim(context.Background(), c)
	require.NoError(t, err)
	return res
}

// requireTime compares times by instant, to the microsecond (the finest
// precision a store must keep).
func requireTime(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	require.True(t, want.Equal(got), "%s: want %s, got %s", what, want, got)
}

// requireOwnedInProgress checks that res is a successful claim of c as stored.
func requireOwnedInProgress(t *testing.T, c idemstore.Claim, res idemstore.ClaimResult) {
	t.Helper()
	require.True(t, res.Claimed, "the claim should hold the record")
	rec := res.Record
	require.Equal(t, c.UserID, rec.UserID)
	require.Equal(t, c.Key, rec.Key)
	require.Equal(t, c.Owner, rec.Owner)
	require.Equal(t, c.Fingerprint, rec.Fingerprint)
	require.Equal(t, idemstore.StatusInProgress, rec.Status)
	require.Nil(t, rec.Response, "an in-progress record has no response")
	requireTime(t, c.Now, rec.CreatedAt, "CreatedAt")
	requireTime(t, c.LeaseUntil, rec.LeaseUntil, "LeaseUntil")
	requireTime(t, c.ExpiresAt, rec.ExpiresAt, "ExpiresAt")
}

// requireResponse compares stored responses exactly; nil and empty header
// maps are the same.
func requireResponse(t *testing.T, want idemstore.Response, got *idemstore.Response) {
	t.Helper()
	require.NotNil(t, got, "a completed record has its response")
	require.Equal(t, want.StatusCode, got.StatusCode)
	require.Equal(t, want.IsBase64Encoded, got.IsBase64Encoded)
	require.Equal(t, []byte(want.Body), []byte(got.Body), "body byte for byte")
	require.Equal(t, len(want.Headers), len(got.Headers), "headers: want %q, got %q", want.Headers, got.Headers)
	for k, v := range want.Headers {
		require.Equal(t, v, got.Headers[k], "header %q", k)
	}
}

var jsonResponse = idemstore.Response{
	StatusCode: 201,
	Headers:    map[string]string{"Content-Type": "application/json", "Location": "/tasks/1"},
	Body:       `{"id":"1","title":"write tests"}`,
}

func (s suite) claimFreshKey(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("a"), base)
	requireOwnedInProgress(t, c, mustClaim(t, st, c))
}

func (s suite) conflictReturnsExistingRecord(t *testing.T) {
	st := s.newStore(t)
	first := claimAt(newRef(), hash("first"), base)
	mustClaim(t, st, first)

	for name, requestHash := range map[string]string{"same fingerprint": hash("first"), "other fingerprint": hash("second")} {
		second := claimAt(withOwner(first.Ref), requestHash, base.Add(time.Second))
		res := mustClaim(t, st, second)
		require.False(t, res.Claimed, name)
		requireOwner(t, first.Owner, res.Record)
		require.Equal(t, first.Fingerprint, res.Record.Fingerprint, "%s: the caller compares the stored fingerprint", name)
		require.Equal(t, idemstore.StatusInProgress, res.Record.Status, name)
		requireTimeIfSet(t, first.LeaseUntil, res.Record.LeaseUntil, name+": LeaseUntil untouched")
		requireTimeIfSet(t, first.ExpiresAt, res.Record.ExpiresAt, name+": ExpiresAt untouched")
		requireTimeIfSet(t, first.Now, res.Record.CreatedAt, name+": CreatedAt untouched")
	}
	// The first owner still holds the record.
	require.NoError(t, st.Complete(context.Background(), completionAt(first.Ref, jsonResponse, base.Add(2*time.Second))))
}

// requireOwner checks the owner of a record not held by the caller, when
// the store returned it.
func requireOwner(t *testing.T, want string, rec idemstore.Record) {
	t.Helper()
	if rec.Owner != "" {
		require.Equal(t, want, rec.Owner, "the record's owner")
	}
}

// requireTimeIfSet is requireTime for the times a store may leave zero.
func requireTimeIfSet(t *testing.T, want, got time.Time, what string) {
	t.Helper()
	if !got.IsZero() {
		requireTime(t, want, got, what)
	}
}

func (s suite) repeatedClaimBySameOwner(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("a"), base)
	mustClaim(t, st, c)
	again := c
	again.Now = base.Add(time.Second)
	res := mustClaim(t, st, again)
	require.True(t, res.Claimed, "a claim repeated by its owner after a lost reply succeeds")
	require.Equal(t, c.Owner, res.Record.Owner)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)

	// The owner can then complete as usual.
	require.NoError(t, st.Complete(context.Background(), completionAt(c.Ref, jsonResponse, base.Add(2*time.Second))))
}

// repeatedClaimOtherRequest: an owner token is not always unique (a
// Config.Owner that returns a constant), so the same owner claiming its
// live key for another request holds nothing: it gets the record, whose
// fingerprint differs, and the decorator answers 422.
func (s suite) repeatedClaimOtherRequest(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("first"), base)
	mustClaim(t, st, c)
	other := claimAt(c.Ref, hash("other"), base.Add(time.Second))
	res := mustClaim(t, st, other)
	require.False(t, res.Claimed, "the same owner with another request must not hold the record")
	require.Equal(t, c.Fingerprint, res.Record.Fingerprint, "the stored fingerprint, which the caller compares")
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)

	// The record is as the first claim left it: the same request still
	// holds it, and completes it.
	again := mustClaim(t, st, claimAt(c.Ref, hash("first"), base.Add(2*time.Second)))
	require.True(t, again.Claimed)
	require.NoError(t, st.Complete(context.Background(), completionAt(c.Ref, jsonResponse, base.Add(3*time.Second))))
	res = mustClaim(t, st, claimAt(c.Ref, hash("other"), base.Add(4*time.Second)))
	require.False(t, res.Claimed)
	require.Equal(t, c.Fingerprint, res.Record.Fingerprint)
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
}

// callerAhead: an invocation whose clock runs ahead of the server's (here
// by 3 s more than the lease has left) must not take over a lease that is
// live by the server's clock, nor treat a live completed record as expired.
func (s suite) callerAhead(t *testing.T) {
	st := s.newStore(t)
	now := time.Now().Truncate(time.Millisecond)
	first := claimAt(newRef(), hash("first"), now)
	first.LeaseUntil = now.Add(10 * time.Second)
	requireOwnedInProgress(t, first, mustClaim(t, st, first))

	ahead := claimAt(withOwner(first.Ref), hash("first"), first.LeaseUntil.Add(3*time.Second))
	res := mustClaim(t, st, ahead)
	require.False(t, res.Claimed, "a caller 3 s past the lease by its own clock took over a live lease")
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	require.NoError(t, st.Complete(context.Background(), completionAt(first.Ref, jsonResponse, now)), "the first owner still holds it")

	done := claimAt(newRef(), hash("done"), now)
	mustClaim(t, st, done)
	short := idemstore.Completion{Ref: done.Ref, Response: jsonResponse, Now: now, ExpiresAt: now.Add(10 * time.Second)}
	require.NoError(t, st.Complete(context.Background(), short))
	res = mustClaim(t, st, claimAt(withOwner(done.Ref), hash("done"), short.ExpiresAt.Add(3*time.Second)))
	require.False(t, res.Claimed, "a caller ahead took over a completed record that has not expired")
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	requireResponse(t, jsonResponse, res.Record.Response)
}

// callerBehind: a lease that ran out a second ago by the real clock is
// taken over by a caller on time, but not yet by one whose clock runs 5 s
// behind.
func (s suite) callerBehind(t *testing.T) {
	st := s.newStore(t)
	now := time.Now().Truncate(time.Millisecond)
	first := claimAt(newRef(), hash("first"), now.Add(-lease-time.Second))
	mustClaim(t, st, first)

	behind := claimAt(withOwner(first.Ref), hash("first"), now.Add(-5*time.Second))
	res := mustClaim(t, st, behind)
	require.False(t, res.Claimed, "by its own clock the lease is still live: the takeover waits")
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)

	onTime := claimAt(withOwner(first.Ref), hash("first"), time.Now().Truncate(time.Millisecond))
	requireOwnedInProgress(t, onTime, mustClaim(t, st, onTime))
}

func (s suite) completedRecordReplays(t *testing.T) {
	bodies := map[string]idemstore.Response{
		"json": jsonResponse,
		"json with white space and key order": {StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"},
			Body: "{ \"z\": 1,\n  \"a\": [1.0, 2e3, 1E+2, -0],\t\"a\": \"dup\", \"big\": 123456789012345678901234567890 }\n"},
		"json scalar":         {StatusCode: 200, Body: `"just a string"`},
		"json null":           {StatusCode: 200, Body: `null`},
		"plain text":          {StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain; charset=utf-8"}, Body: "hello, world\r\n"},
		"html":                {StatusCode: 200, Headers: map[string]string{"Content-Type": "text/html"}, Body: `<p class="x">a & b < c > d</p>`},
		"empty":               {StatusCode: 204},
		"empty with headers":  {StatusCode: 202, Headers: map[string]string{"Location": "/jobs/9"}},
		"base64":              {StatusCode: 200, Headers: map[string]string{"Content-Type": "image/png"}, Body: "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==", IsBase64Encoded: true},
		"unicode":             {StatusCode: 200, Body: "日本語 ✓ \U0001F600 e\u0301 \u2028\u2029 \ufeff"},
		"escapes":             {StatusCode: 200, Body: `back\slash "quote" \u0000 \n literally` + "\t\b\f\x01\x1f\x7f"},
		"NUL bytes":           {StatusCode: 200, Body: "before\x00after\x00"},
		"invalid UTF-8":       {StatusCode: 200, Body: "\xff\xfe\xc3\x28 half \xe2\x82"},
		"4xx problem":         {StatusCode: 404, Headers: map[string]string{"Content-Type": "application/problem+json"}, Body: `{"type":"about:blank","status":404}`},
		"3xx":                 {StatusCode: 303, Headers: map[string]string{"Location": "/elsewhere"}},
		"header with NUL":     {StatusCode: 200, Headers: map[string]string{"X-Odd": "a\x00b", "Content-Type": "text/plain"}, Body: "x"},
		"large":               {StatusCode: 200, Body: largeBody()},
		"lone surrogate text": {StatusCode: 200, Body: `"\ud800"`},
	}
	for name, resp := range bodies {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := s.newStore(t)
			c := claimAt(newRef(), hash(name), base)
			mustClaim(t, st, c)
			done := completionAt(c.Ref, resp, base.Add(time.Second))
			require.NoError(t, st.Complete(context.Background(), done))

			for _, retry := range []idemstore.Claim{
				claimAt(withOwner(c.Ref), hash(name), base.Add(2*time.Second)),
				claimAt(c.Ref, hash(name), base.Add(2*time.Second)), // even its first owner only replays
			} {
				res := mustClaim(t, st, retry)
				require.False(t, res.Claimed)
				require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
				requireOwner(t, c.Owner, res.Record)
				require.Equal(t, c.Fingerprint, res.Record.Fingerprint)
				requireTimeIfSet(t, done.ExpiresAt, res.Record.ExpiresAt, "ExpiresAt is the completion's")
				require.True(t, res.Record.LeaseUntil.IsZero(), "a completed record has no lease")
				requireResponse(t, resp, res.Record.Response)
			}
		})
	}
}

func largeBody() string {
	b := make([]byte, 256<<10)
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz{}[]\",:0123456789 \n"[i%45]
	}
	return string(b)
}

func (s suite) takeoverAfterLeaseExpiry(t *testing.T) {
	st := s.newStore(t)
	first := claimAt(newRef(), hash("first"), base)
	mustClaim(t, st, first)

	justBefore := claimAt(withOwner(first.Ref), hash("second"), first.LeaseUntil.Add(-time.Millisecond))
	res := mustClaim(t, st, justBefore)
	require.False(t, res.Claimed, "the lease still holds a millisecond before it ends")
	requireOwner(t, first.Owner, res.Record)

	second := claimAt(withOwner(first.Ref), hash("second"), first.LeaseUntil)
	requireOwnedInProgress(t, second, mustClaim(t, st, second))
}

func (s suite) takeoverAfterExpiresAt(t *testing.T) {
	st := s.newStore(t)
	// A TTL of minutes, so that the expiry is in the past of the real clock
	// too (see the package comment).
	const shortTTL = 10 * time.Minute
	first := claimAt(newRef(), hash("first"), base)
	first.ExpiresAt = base.Add(shortTTL)
	mustClaim(t, st, first)
	done := completionAt(first.Ref, jsonResponse, base.Add(time.Second))
	done.ExpiresAt = done.Now.Add(shortTTL)
	require.NoError(t, st.Complete(context.Background(), done))

	justBefore := claimAt(withOwner(first.Ref), hash("second"), done.ExpiresAt.Add(-time.Millisecond))
	res := mustClaim(t, st, justBefore)
	require.False(t, res.Claimed, "a completed record is live until its ExpiresAt")
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)

	second := claimAt(withOwner(first.Ref), hash("second"), done.ExpiresAt)
	requireOwnedInProgress(t, second, mustClaim(t, st, second))

	// An in-progress record whose ExpiresAt passed (a lease longer than the
	// TTL) is taken over too.
	long := claimAt(newRef(), hash("long"), base)
	long.ExpiresAt = base.Add(shortTTL)
	long.LeaseUntil = base.Add(2 * shortTTL)
	mustClaim(t, st, long)
	late := claimAt(withOwner(long.Ref), hash("late"), long.ExpiresAt)
	requireOwnedInProgress(t, late, mustClaim(t, st, late))
}

func (s suite) completeAfterLostLease(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	first := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, first)
	second := claimAt(withOwner(first.Ref), hash("req"), first.LeaseUntil.Add(time.Second))
	requireOwnedInProgress(t, second, mustClaim(t, st, second))

	stale := idemstore.Response{StatusCode: 200, Body: "stale"}
	err := st.Complete(ctx, completionAt(first.Ref, stale, second.Now.Add(time.Second)))
	require.ErrorIs(t, err, idemstore.ErrLeaseLost)
	require.ErrorIs(t, st.Release(ctx, first.Ref), idemstore.ErrLeaseLost)

	// The new owner's record is intact.
	res := mustClaim(t, st, claimAt(withOwner(first.Ref), hash("req"), second.Now.Add(2*time.Second)))
	require.False(t, res.Claimed)
	requireOwner(t, second.Owner, res.Record)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	require.Nil(t, res.Record.Response)
	requireTimeIfSet(t, second.LeaseUntil, res.Record.LeaseUntil, "LeaseUntil of the new owner")

	// And the new owner completes it.
	require.NoError(t, st.Complete(ctx, completionAt(second.Ref, jsonResponse, second.Now.Add(3*time.Second))))
	res = mustClaim(t, st, claimAt(withOwner(first.Ref), hash("req"), second.Now.Add(4*time.Second)))
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	requireResponse(t, jsonResponse, res.Record.Response)
}

func (s suite) completeWithoutRecord(t *testing.T) {
	st := s.newStore(t)
	err := st.Complete(context.Background(), completionAt(newRef(), jsonResponse, base))
	require.ErrorIs(t, err, idemstore.ErrLeaseLost)
	require.ErrorIs(t, st.Release(context.Background(), newRef()), idemstore.ErrLeaseLost)
	// Nothing was created by either.
	c := claimAt(newRef(), hash("x"), base)
	requireOwnedInProgress(t, c, mustClaim(t, st, c))
}

func (s suite) completeTwice(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	c := claimAt(newRef(), hash("x"), base)
	mustClaim(t, st, c)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base.Add(time.Second))))
	other := idemstore.Response{StatusCode: 200, Body: "second"}
	require.ErrorIs(t, st.Complete(ctx, completionAt(c.Ref, other, base.Add(2*time.Second))), idemstore.ErrLeaseLost,
		"a completed record is no longer in progress: nothing is written")
	res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("x"), base.Add(3*time.Second)))
	requireResponse(t, jsonResponse, res.Record.Response)
	requireTimeIfSet(t, base.Add(time.Second).Add(ttl), res.Record.ExpiresAt, "ExpiresAt of the first completion")
}

func (s suite) releaseByNonOwner(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("x"), base)
	mustClaim(t, st, c)
	require.ErrorIs(t, st.Release(context.Background(), withOwner(c.Ref)), idemstore.ErrLeaseLost)
	res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("x"), base.Add(time.Second)))
	require.False(t, res.Claimed, "the record survived the stranger's release")
	requireOwner(t, c.Owner, res.Record)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	require.NoError(t, st.Release(context.Background(), c.Ref), "its owner still holds it")
}

func (s suite) releaseByOwner(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	c := claimAt(newRef(), hash("x"), base)
	mustClaim(t, st, c)
	require.NoError(t, st.Release(ctx, c.Ref))
	require.ErrorIs(t, st.Release(ctx, c.Ref), idemstore.ErrLeaseLost, "a second release finds nothing")
	require.ErrorIs(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base)), idemstore.ErrLeaseLost,
		"a released record cannot be completed")

	retry := claimAt(withOwner(c.Ref), hash("other"), base.Add(time.Second))
	requireOwnedInProgress(t, retry, mustClaim(t, st, retry))
}

func (s suite) releaseOfCompleted(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	c := claimAt(newRef(), hash("x"), base)
	mustClaim(t, st, c)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base.Add(time.Second))))
	require.ErrorIs(t, st.Release(ctx, c.Ref), idemstore.ErrLeaseLost, "a completed record is never released")
	res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("x"), base.Add(2*time.Second)))
	require.False(t, res.Claimed)
	requireResponse(t, jsonResponse, res.Record.Response)
}

func (s suite) perUserIsolation(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	alice := claimAt(newRef(), hash("alice"), base)
	bob := claimAt(idemstore.Ref{UserID: uuid.NewString(), Key: alice.Key, Owner: "owner-" + uuid.NewString()}, hash("bob"), base.Add(time.Second))

	mustClaim(t, st, alice)
	require.NoError(t, st.Complete(ctx, completionAt(alice.Ref, jsonResponse, base.Add(time.Second))))

	// Bob's claim of the same key is a fresh record: nothing of Alice's shows.
	res := mustClaim(t, st, bob)
	requireOwnedInProgress(t, bob, res)

	// Bob's owner token cannot touch Alice's record, even with her key.
	bobOnAlice := idemstore.Ref{UserID: alice.UserID, Key: alice.Key, Owner: bob.Owner}
	require.ErrorIs(t, st.Release(ctx, bobOnAlice), idemstore.ErrLeaseLost)
	// Alice's owner token cannot touch Bob's record.
	aliceOnBob := idemstore.Ref{UserID: bob.UserID, Key: bob.Key, Owner: alice.Owner}
	require.ErrorIs(t, st.Complete(ctx, completionAt(aliceOnBob, jsonResponse, base.Add(2*time.Second))), idemstore.ErrLeaseLost)

	// Bob's release frees only Bob's record.
	require.NoError(t, st.Release(ctx, bob.Ref))
	res = mustClaim(t, st, claimAt(withOwner(alice.Ref), hash("alice"), base.Add(3*time.Second)))
	require.False(t, res.Claimed)
	require.Equal(t, alice.UserID, res.Record.UserID)
	requireResponse(t, jsonResponse, res.Record.Response)
	again := claimAt(withOwner(bob.Ref), hash("bob"), base.Add(3*time.Second))
	requireOwnedInProgress(t, again, mustClaim(t, st, again))
}

// race runs n claims of one key at once, the i-th built by claim(i), and
// returns the results.
func race(t *testing.T, st idemstore.Store, n int, claim func(i int) idemstore.Claim) []idemstore.ClaimResult {
	t.Helper()
	results := make([]idemstore.ClaimResult, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = st.Claim(context.Background(), claim(i))
		})
	}
	close(start)
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return results
}

// requireOneWinner checks that exactly one of the racing claims won and that
// every loser saw the winner's record, with its fingerprint.
func requireOneWinner(t *testing.T, st idemstore.Store, claims []idemstore.Claim, results []idemstore.ClaimResult) {
	t.Helper()
	winner := -1
	for i, res := range results {
		if res.Claimed {
			require.Equal(t, -1, winner, "claims %d and %d both won", winner, i)
			winner = i
		}
	}
	require.NotEqual(t, -1, winner, "no claim won")
	requireOwnedInProgress(t, claims[winner], results[winner])
	// The winner holds the record: its completion is written.
	require.NoError(t, st.Complete(context.Background(), completionAt(claims[winner].Ref, jsonResponse, claims[winner].Now)))
	for i, res := range results {
		if i == winner {
			continue
		}
		if res.Record.Owner != "" {
			require.Equal(t, claims[winner].Owner, res.Record.Owner, "claim %d saw another record", i)
		}
		require.Equal(t, claims[winner].Fingerprint, res.Record.Fingerprint, "claim %d must see the winner's fingerprint", i)
		require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	}
}

func (s suite) concurrentClaims(t *testing.T) {
	st := s.newStore(t)
	ref := newRef()
	claims := make([]idemstore.Claim, s.opts.Concurrency)
	for i := range claims {
		// Half the racers send another fingerprint: whichever wins, the
		// others must see its fingerprint to tell a mismatch from a retry.
		claims[i] = claimAt(withOwner(ref), hash(fmt.Sprint(i%2)), base)
	}
	requireOneWinner(t, st, claims, race(t, st, len(claims), func(i int) idemstore.Claim { return claims[i] }))
}

func (s suite) concurrentTakeover(t *testing.T) {
	st := s.newStore(t)
	stale := claimAt(newRef(), hash("stale"), base)
	mustClaim(t, st, stale)
	claims := make([]idemstore.Claim, s.opts.Concurrency)
	for i := range claims {
		claims[i] = claimAt(withOwner(stale.Ref), hash(fmt.Sprint(i%2)), stale.LeaseUntil.Add(time.Second))
	}
	requireOneWinner(t, st, claims, race(t, st, len(claims), func(i int) idemstore.Claim { return claims[i] }))
}

func (s suite) cancelledContext(t *testing.T) {
	st := s.newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c := claimAt(newRef(), hash("x"), base)

	_, err := st.Claim(ctx, c)
	requireStoreError(t, err, "claim")
	require.ErrorIs(t, err, context.Canceled)
	requireStoreError(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base)), "complete")
	requireStoreError(t, st.Release(ctx, c.Ref), "release")
	requireStoreError(t, st.Renew(ctx, renewalAt(c.Ref, base, base.Add(lease))), "renew")

	// Nothing was claimed.
	requireOwnedInProgress(t, c, mustClaim(t, st, c))
}

func requireStoreError(t *testing.T, err error, op string) {
	t.Helper()
	var se *idemstore.Error
	require.ErrorAs(t, err, &se, "a failure must be a *idemstore.Error")
	require.Equal(t, op, se.Op)
	require.NotErrorIs(t, err, idemstore.ErrLeaseLost)
}

func (s suite) brokenStore(t *testing.T) {
	if s.opts.NewBrokenStore == nil {
		t.Skip("storetest: Config.NewBrokenStore not given")
	}
	st := s.opts.NewBrokenStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := claimAt(newRef(), hash("x"), base)
	res, err := st.Claim(ctx, c)
	requireStoreError(t, err, "claim")
	require.False(t, res.Claimed, "a failed claim never says claimed")
	requireStoreError(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base)), "complete")
	requireStoreError(t, st.Release(ctx, c.Ref), "release")
	requireStoreError(t, st.Renew(ctx, renewalAt(c.Ref, base, base.Add(lease))), "renew")
	require.False(t, idemstore.IsPermanent(err), "a server that cannot be reached is a transient failure: %v", err)
	require.Error(t, idempotency.CheckStore(ctx, st))
}

// renewMovesLease: a renewed lease protects the record until its new end,
// and no longer than that; a renewal repeated (a lost reply) succeeds.
func (s suite) renewMovesLease(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	first := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, first)
	renewed := first.LeaseUntil.Add(lease)
	require.NoError(t, st.Renew(ctx, renewalAt(first.Ref, base.Add(lease/2), renewed)))
	require.NoError(t, st.Renew(ctx, renewalAt(first.Ref, base.Add(lease/2), renewed)), "a repeated renewal succeeds")

	afterFirstLease := claimAt(withOwner(first.Ref), hash("req"), first.LeaseUntil.Add(time.Millisecond))
	res := mustClaim(t, st, afterFirstLease)
	require.False(t, res.Claimed, "the renewed lease still holds after the first lease's end")
	requireOwner(t, first.Owner, res.Record)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	requireTimeIfSet(t, renewed, res.Record.LeaseUntil, "LeaseUntil after the renewal")

	justBefore := claimAt(withOwner(first.Ref), hash("req"), renewed.Add(-time.Millisecond))
	require.False(t, mustClaim(t, st, justBefore).Claimed, "the renewed lease holds a millisecond before it ends")

	// The owner completes its renewed record as usual.
	require.NoError(t, st.Complete(ctx, completionAt(first.Ref, jsonResponse, renewed.Add(-time.Second))))
	res = mustClaim(t, st, claimAt(withOwner(first.Ref), hash("req"), renewed.Add(time.Second)))
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	requireResponse(t, jsonResponse, res.Record.Response)
}

// renewPastExpiresAt: a lease renewed past the record's ExpiresAt keeps the
// record (ExpiresAt follows the lease), and is taken over at its end.
func (s suite) renewPastExpiresAt(t *testing.T) {
	st := s.newStore(t)
	const shortTTL = 10 * time.Minute
	first := claimAt(newRef(), hash("req"), base)
	first.ExpiresAt = base.Add(shortTTL)
	mustClaim(t, st, first)
	renewed := base.Add(2 * shortTTL)
	require.NoError(t, st.Renew(context.Background(), renewalAt(first.Ref, base.Add(time.Minute), renewed)))

	afterTTL := claimAt(withOwner(first.Ref), hash("req"), first.ExpiresAt.Add(time.Second))
	res := mustClaim(t, st, afterTTL)
	require.False(t, res.Claimed, "a record whose lease was renewed past its ExpiresAt is not expired")
	requireOwner(t, first.Owner, res.Record)
	requireTimeIfSet(t, renewed, res.Record.ExpiresAt, "ExpiresAt follows the lease")

	late := claimAt(withOwner(first.Ref), hash("req"), renewed)
	requireOwnedInProgress(t, late, mustClaim(t, st, late))
}

// renewAfterLeaseRanOut: an owner whose lease ran out still owns the record
// until a claim takes it over, and may renew it (Renew compares no times).
func (s suite) renewAfterLeaseRanOut(t *testing.T) {
	st := s.newStore(t)
	first := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, first)
	now := first.LeaseUntil.Add(time.Second)
	require.NoError(t, st.Renew(context.Background(), renewalAt(first.Ref, now, now.Add(lease))))
	res := mustClaim(t, st, claimAt(withOwner(first.Ref), hash("req"), now.Add(time.Second)))
	require.False(t, res.Claimed, "the renewal protects the record again")
	requireOwner(t, first.Owner, res.Record)
}

// renewAfterTakeover: once another owner took the record over, the old
// owner's renewal is refused and changes nothing of the new owner's record.
func (s suite) renewAfterTakeover(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	first := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, first)
	second := claimAt(withOwner(first.Ref), hash("req"), first.LeaseUntil)
	requireOwnedInProgress(t, second, mustClaim(t, st, second))

	err := st.Renew(ctx, renewalAt(first.Ref, second.Now, second.LeaseUntil.Add(time.Hour)))
	require.ErrorIs(t, err, idemstore.ErrLeaseLost)
	var se *idemstore.Error
	require.False(t, errors.As(err, &se), "a lost lease is not a store failure")

	// The new owner's lease is as it claimed it: it ends when it said.
	third := claimAt(withOwner(first.Ref), hash("req"), second.LeaseUntil)
	requireOwnedInProgress(t, third, mustClaim(t, st, third))
}

// renewByNonOwner: a stranger's renewal is refused and does not extend the
// owner's lease.
func (s suite) renewByNonOwner(t *testing.T) {
	st := s.newStore(t)
	c := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, c)
	require.ErrorIs(t, st.Renew(context.Background(), renewalAt(withOwner(c.Ref), base, base.Add(time.Hour))), idemstore.ErrLeaseLost)
	later := claimAt(withOwner(c.Ref), hash("req"), c.LeaseUntil)
	requireOwnedInProgress(t, later, mustClaim(t, st, later))
}

// renewOfCompletedOrMissing: a completed record is not renewed (it keeps
// its response and expiry), and a missing one is not created.
func (s suite) renewOfCompletedOrMissing(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	c := claimAt(newRef(), hash("req"), base)
	mustClaim(t, st, c)
	require.NoError(t, st.Complete(ctx, completionAt(c.Ref, jsonResponse, base.Add(time.Second))))
	require.ErrorIs(t, st.Renew(ctx, renewalAt(c.Ref, base.Add(2*time.Second), base.Add(48*time.Hour))), idemstore.ErrLeaseLost)
	res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash("req"), base.Add(3*time.Second)))
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	requireResponse(t, jsonResponse, res.Record.Response)
	requireTimeIfSet(t, base.Add(time.Second).Add(ttl), res.Record.ExpiresAt, "ExpiresAt of the completion")

	missing := newRef()
	require.ErrorIs(t, st.Renew(ctx, renewalAt(missing, base, base.Add(lease))), idemstore.ErrLeaseLost)
	fresh := claimAt(missing, hash("req"), base)
	requireOwnedInProgress(t, fresh, mustClaim(t, st, fresh))
}
