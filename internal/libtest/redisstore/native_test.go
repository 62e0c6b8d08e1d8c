package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// The completion with SET … IFEQ, on Valkey 8.1 (native.go). Each test
// names the commands the store sends, so that a completion that fell back
// to the script, or skipped it when it should not have, shows.

// valkeyHooked is hookedStore on the Valkey of the tests, which has
// SET … IFEQ.
func valkeyHooked(t *testing.T) (*redisstore.Store, *commandHook, *redis.Client) {
	t.Helper()
	st, hook, other := hookedStore(t, servers[1])
	require.True(t, hasIFEQ(t, other), "the Valkey of the tests has SET … IFEQ")
	return st, hook, other
}

// requireIFEQThenScript checks that the commands since the hook's last take
// are a SET (… IFEQ, which missed) and then the complete script.
func requireIFEQThenScript(t *testing.T, hook *commandHook) {
	t.Helper()
	names := hook.take()
	require.NotEmpty(t, names)
	require.Equal(t, "set", names[0], "SET … IFEQ first")
	require.Contains(t, [][]string{{"evalsha"}, {"evalsha", "eval"}}, names[1:], "then the script")
}

func completion(ref idemstore.Ref, now time.Time) idemstore.Completion {
	return idemstore.Completion{
		Ref:       ref,
		Response:  idemstore.Response{StatusCode: 201, Headers: map[string]string{"Location": "/tasks/1"}, Body: `{"id":"1"}`},
		Now:       now,
		ExpiresAt: now.Add(24 * time.Hour),
	}
}

// TestNativeCompletionAfterRenewals: the store follows its own renewals,
// the one that moves the lease alone and the one that moves the record's
// expiry with it, so that the completion still is one SET … IFEQ; the
// record it writes is the one the script writes.
func TestNativeCompletionAfterRenewals(t *testing.T) {
	t.Parallel()
	st, hook, other := valkeyHooked(t)
	ctx := context.Background()
	now := time.Now()
	c := idemstore.Claim{Ref: newRef(), Fingerprint: "h", Now: now, LeaseUntil: now.Add(10 * time.Second), ExpiresAt: now.Add(time.Minute)}
	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.NoError(t, st.Renew(ctx, idemstore.Renewal{Ref: c.Ref, Now: now.Add(5 * time.Second), LeaseUntil: now.Add(15 * time.Second)}))
	require.NoError(t, st.Renew(ctx, idemstore.Renewal{Ref: c.Ref, Now: now.Add(50 * time.Second), LeaseUntil: now.Add(2 * time.Minute)}), "a lease past the record's expiry")
	key := st.Key(c.UserID, c.Key)
	inProgress, err := storedRecord(ctx, st, c.Ref)
	require.NoError(t, err)
	require.True(t, now.Add(2*time.Minute).Truncate(time.Microsecond).Equal(inProgress.ExpiresAt), "the renewal moved the expiry")
	hook.take()

	done := completion(c.Ref, now.Add(time.Minute))
	require.NoError(t, st.Complete(ctx, done))
	require.Equal(t, []string{"set"}, hook.take(), "one SET … IFEQ, no script")
	rec, err := storedRecord(ctx, st, c.Ref)
	require.NoError(t, err)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.Equal(t, c.Owner, rec.Owner)
	require.Equal(t, "h", rec.Fingerprint)
	require.True(t, now.Truncate(time.Microsecond).Equal(rec.CreatedAt))
	require.True(t, done.ExpiresAt.Truncate(time.Microsecond).Equal(rec.ExpiresAt))
	require.Equal(t, done.Response, *rec.Response)
	require.InDelta(t, (24 * time.Hour).Seconds(), other.PTTL(ctx, key).Val().Seconds(), 5)
}

// TestNativeCompletionOfALostLease: a run whose record was taken over by
// another process completes nothing. Its SET … IFEQ finds other bytes and
// writes nothing; the script then answers that the record is no longer the
// run's.
func TestNativeCompletionOfALostLease(t *testing.T) {
	t.Parallel()
	st, hook, other := valkeyHooked(t)
	ctx := context.Background()
	old, next := abandoned(t, st)
	res, err := must.Value(redisstore.New(other, nil)).Claim(ctx, next)
	require.NoError(t, err)
	require.True(t, res.Claimed, "another process took the record over")
	key := st.Key(old.UserID, old.Key)
	before := other.Get(ctx, key).Val()
	hook.take()

	require.ErrorIs(t, st.Complete(ctx, completion(old.Ref, time.Now())), idemstore.ErrLeaseLost)
	requireIFEQThenScript(t, hook)
	require.Equal(t, before, other.Get(ctx, key).Val(), "the new owner's record is untouched")
}

// TestNativeCompletionOfAChangedRecord: the run's record changed in a way
// the store did not see (a renewal whose reply was lost moves the lease and
// drops what the store remembers; here another client moves it): the
// SET … IFEQ misses, and the script completes the record, which is still
// the run's.
func TestNativeCompletionOfAChangedRecord(t *testing.T) {
	t.Parallel()
	st, hook, other := valkeyHooked(t)
	ctx := context.Background()
	now := time.Now()
	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, must.Value(redisstore.New(other, nil)).Renew(ctx, idemstore.Renewal{Ref: c.Ref, Now: now, LeaseUntil: now.Add(2 * time.Minute)}))
	hook.take()

	done := completion(c.Ref, now)
	require.NoError(t, st.Complete(ctx, done))
	requireIFEQThenScript(t, hook)
	rec, err := storedRecord(ctx, st, c.Ref)
	require.NoError(t, err)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.Equal(t, done.Response, *rec.Response)
}

// TestNativeCompletionOfAReleasedRun: a run released and claimed again by
// another owner cannot complete over the newcomer, and a release forgets
// the run: its completion goes to the script directly.
func TestNativeCompletionOfAReleasedRun(t *testing.T) {
	t.Parallel()
	st, hook, _ := valkeyHooked(t)
	ctx := context.Background()
	now := time.Now()
	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, c.Ref))
	newcomer := claimAt(withOwner(c.Ref), now, time.Minute, time.Hour)
	res, err := st.Claim(ctx, newcomer)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	hook.take()

	require.ErrorIs(t, st.Complete(ctx, completion(c.Ref, now)), idemstore.ErrLeaseLost)
	require.Contains(t, [][]string{{"evalsha"}, {"evalsha", "eval"}}, hook.take(), "the released run is not remembered")
	require.NoError(t, st.Complete(ctx, completion(newcomer.Ref, now)))
	require.Equal(t, []string{"set"}, hook.take(), "the newcomer completes with SET … IFEQ")
}
