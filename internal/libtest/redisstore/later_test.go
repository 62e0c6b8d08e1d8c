package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestRecordOfALaterFormatIsATransientFailure: during a rolling deploy this
// release may meet a record that a later one wrote (a version byte above
// the ones it knows). Every call answers it as a store failure that is not
// permanent (503 with Retry-After: the client's retry reaches the later
// release), and nothing is overwritten.
func TestRecordOfALaterFormatIsATransientFailure(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.NewClient(t)
	prefix := "later-" + uuid.NewString()[:8] + ":"
	st := must.Value(redisstore.New(client, &redisstore.Options{KeyPrefix: prefix}))
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
	value := "\x03c" + strings.Repeat("\x00", 60) // version 3
	redisKey := prefix + "{" + ref.UserID + ":" + ref.Key + "}"
	require.NoError(t, client.Set(ctx, redisKey, value, time.Hour).Err())

	now := time.Now()
	transient := func(err error, op string) {
		t.Helper()
		var se *idemstore.Error
		require.True(t, errors.As(err, &se), "%s: %v", op, err)
		require.False(t, se.Permanent, "%s: a later format is not a misconfiguration: %v", op, err)
		require.Contains(t, err.Error(), "later", op)
	}
	_, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now.Add(2 * time.Hour), LeaseUntil: now.Add(3 * time.Hour), ExpiresAt: now.Add(4 * time.Hour)})
	transient(err, "claim")
	transient(st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(time.Hour)}), "complete")
	transient(st.Release(ctx, ref), "release")
	transient(st.Renew(ctx, idemstore.Renewal{Ref: ref, Now: now, LeaseUntil: now.Add(time.Minute)}), "renew")
	_, _, err = st.Get(ctx, ref.UserID, ref.Key)
	transient(err, "get")
	got, err := client.Get(ctx, redisKey).Result()
	require.NoError(t, err)
	require.Equal(t, value, got, "the later release's record is untouched")
}
