package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestMalformedVersionTwoIsNotARecord: version 2 is a completed record
// with an origin, so a version-2 value in progress is not a record. Every
// write answers it with the permanent store error, whoever calls, never
// with ErrLeaseLost, and nothing is written.
func TestMalformedVersionTwoIsNotARecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	client := redistest.NewClient(t)
	prefix := "malformed-" + uuid.NewString()[:8] + ":"
	st := must.Value(redisstore.New(client, &redisstore.Options{KeyPrefix: prefix}))
	now := time.Now()
	for _, caller := range []string{"o", "someone else"} {
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
		_, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		redisKey := prefix + "{" + ref.UserID + ":" + ref.Key + "}"
		value, err := client.Get(ctx, redisKey).Result()
		require.NoError(t, err)
		malformed := "\x02" + value[1:] // version 2, still in progress
		require.NoError(t, client.Set(ctx, redisKey, malformed, time.Hour).Err())

		ref.Owner = caller
		permanent := func(err error, op string) {
			t.Helper()
			require.False(t, errors.Is(err, idemstore.ErrLeaseLost), "%s by %q: %v", op, caller, err)
			require.True(t, idemstore.IsPermanent(err), "%s by %q: a value that is not a record is a permanent store error: %v", op, caller, err)
		}
		permanent(st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(time.Hour)}), "complete")
		permanent(st.Renew(ctx, idemstore.Renewal{Ref: ref, Now: now, LeaseUntil: now.Add(2 * time.Minute)}), "renew")
		permanent(st.Release(ctx, ref), "release")
		got, err := client.Get(ctx, redisKey).Result()
		require.NoError(t, err)
		require.Equal(t, malformed, got, "nothing is written")
	}
}
