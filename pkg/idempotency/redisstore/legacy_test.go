package redisstore_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// The scripts of the hash layout as they were released, before the string
// layout: they write records as an earlier version of the store did.
var (
	hashClaim    = redis.NewScript(mustRead("testdata/hash_claim.lua"))
	hashComplete = redis.NewScript(mustRead("testdata/hash_complete.lua"))
)

func mustRead(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }

// writeHashClaim claims c as the hash layout's store did.
func writeHashClaim(t *testing.T, client *redis.Client, st *redisstore.Store, c idempotency.Claim) {
	t.Helper()
	reply, err := hashClaim.Run(context.Background(), client, []string{st.Key(c.UserID, c.Key)},
		c.Owner, c.RequestHash, c.Now.UnixMicro(), c.LeaseUntil.UnixMicro(), c.ExpiresAt.UnixMicro(),
		ms(later(c.LeaseUntil, c.ExpiresAt).Sub(c.Now))).Slice()
	require.NoError(t, err)
	require.Equal(t, []any{"claimed"}, reply)
	require.Equal(t, "hash", client.Type(context.Background(), st.Key(c.UserID, c.Key)).Val())
}

// writeHashComplete completes c as the hash layout's store did; headers
// are JSON text as it wrote them.
func writeHashComplete(t *testing.T, client *redis.Client, st *redisstore.Store, c idempotency.Completion, headersJSON, headersEncoding string) {
	t.Helper()
	b64 := "0"
	if c.Response.IsBase64Encoded {
		b64 = "1"
	}
	n, err := hashComplete.Run(context.Background(), client, []string{st.Key(c.UserID, c.Key)},
		c.Owner, c.Response.StatusCode, headersJSON, headersEncoding, c.Response.Body, b64,
		c.ExpiresAt.UnixMicro(), ms(c.ExpiresAt.Sub(c.Now))).Int64()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func withOwner(r idempotency.Ref) idempotency.Ref {
	r.Owner = uuid.NewString()
	return r
}

// TestHashLayoutInProgress: a claim of the hash layout in progress across
// the upgrade still protects its key, and its owner reclaims, completes
// and releases it with the new store.
func TestHashLayoutInProgress(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)

	first := claimAt(newRef(), now, time.Minute, 24*time.Hour)
	writeHashClaim(t, client, st, first)
	key := st.Key(first.UserID, first.Key)

	res, err := st.Claim(ctx, claimAt(withOwner(first.Ref), now.Add(time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed, "another owner meets the old claim")
	require.Equal(t, idempotency.StatusInProgress, res.Record.Status)
	require.Equal(t, first.Owner, res.Record.Owner)

	other := claimAt(first.Ref, now.Add(time.Second), time.Minute, 24*time.Hour)
	other.RequestHash = "other"
	res, err = st.Claim(ctx, other)
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, "h", res.Record.RequestHash, "the stored fingerprint, which the caller compares")

	again := first
	again.Now = now.Add(2 * time.Second)
	res, err = st.Claim(ctx, again)
	require.NoError(t, err)
	require.True(t, res.Claimed, "the owner's repeated claim (a lost reply) holds it")

	resp := idempotency.StoredResponse{StatusCode: 201, Body: "{\"id\":1}\x00\xff",
		Headers: map[string]string{"Content-Type": "application/json", "X-Raw": "\xff\x00"}}
	done := idempotency.Completion{Ref: first.Ref, Response: resp, Now: now.Add(3 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
	stranger := done
	stranger.Ref = withOwner(first.Ref)
	require.ErrorIs(t, st.Complete(ctx, stranger), idempotency.ErrLeaseLost)
	require.ErrorIs(t, st.Release(ctx, stranger.Ref), idempotency.ErrLeaseLost)
	require.NoError(t, st.Complete(ctx, done))
	require.Equal(t, "hash", client.Type(ctx, key).Val(), "the completed record stays a hash until it expires")

	res, err = st.Claim(ctx, claimAt(withOwner(first.Ref), now.Add(4*time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, idempotency.StatusCompleted, res.Record.Status)
	require.Equal(t, resp.StatusCode, res.Record.Response.StatusCode)
	require.Equal(t, []byte(resp.Body), []byte(res.Record.Response.Body))
	require.Equal(t, resp.Headers, res.Record.Response.Headers)
	require.ErrorIs(t, st.Release(ctx, first.Ref), idempotency.ErrLeaseLost, "a completed record is not released")
}

// TestHashLayoutCompleted: a response stored by the hash layout's store
// replays after the upgrade, byte for byte.
func TestHashLayoutCompleted(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)
	for name, tc := range map[string]struct {
		resp              idempotency.StoredResponse
		headers, encoding string
	}{
		"json": {idempotency.StoredResponse{StatusCode: 201, Body: `{"id":"1"}`,
			Headers: map[string]string{"Content-Type": "application/json", "Location": "/tasks/1"}},
			`{"Content-Type":"application/json","Location":"/tasks/1"}`, ""},
		"raw bytes, base64 headers": {idempotency.StoredResponse{StatusCode: 200, Body: "\x00\xff", IsBase64Encoded: true,
			Headers: map[string]string{"X-Raw": "\xff"}}, `{"WC1SYXc=":"/w=="}`, "base64"},
		"no headers": {idempotency.StoredResponse{StatusCode: 204}, "", ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := claimAt(newRef(), now, time.Minute, 24*time.Hour)
			writeHashClaim(t, client, st, c)
			writeHashComplete(t, client, st, idempotency.Completion{Ref: c.Ref, Response: tc.resp, Now: now, ExpiresAt: now.Add(24 * time.Hour)}, tc.headers, tc.encoding)

			retry := claimAt(withOwner(c.Ref), now.Add(time.Second), time.Minute, 24*time.Hour)
			res, err := st.Claim(ctx, retry)
			require.NoError(t, err)
			require.False(t, res.Claimed, "the retry replays")
			require.Equal(t, idempotency.StatusCompleted, res.Record.Status)
			got := res.Record.Response
			require.NotNil(t, got)
			require.Equal(t, tc.resp.StatusCode, got.StatusCode)
			require.Equal(t, tc.resp.IsBase64Encoded, got.IsBase64Encoded)
			require.Equal(t, []byte(tc.resp.Body), []byte(got.Body))
			require.Equal(t, len(tc.resp.Headers), len(got.Headers))
			for k, v := range tc.resp.Headers {
				require.Equal(t, v, got.Headers[k])
			}
			require.Equal(t, "hash", client.Type(ctx, st.Key(c.UserID, c.Key)).Val(), "a replay leaves the record as it is")
		})
	}
}

// TestHashLayoutRelease: the owner of an old claim releases it with the new
// store, and the next claim writes the string layout.
func TestHashLayoutRelease(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)
	c := claimAt(newRef(), now, time.Minute, 24*time.Hour)
	writeHashClaim(t, client, st, c)
	key := st.Key(c.UserID, c.Key)

	require.NoError(t, st.Release(ctx, c.Ref))
	require.Zero(t, client.Exists(ctx, key).Val())
	require.ErrorIs(t, st.Release(ctx, c.Ref), idempotency.ErrLeaseLost)

	res, err := st.Claim(ctx, claimAt(withOwner(c.Ref), now.Add(time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.Equal(t, "string", client.Type(ctx, key).Val())
}

// TestHashLayoutTakeover: a hash record whose lease ran out is taken over
// by the new store, which writes the string layout in its place; a caller
// whose clock runs ahead cannot take over a lease live by the server's.
func TestHashLayoutTakeover(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	now := time.Now()

	live := claimAt(newRef(), now, 10*time.Second, 24*time.Hour)
	writeHashClaim(t, client, st, live)
	res, err := st.Claim(ctx, claimAt(withOwner(live.Ref), live.LeaseUntil.Add(3*time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed, "a caller 3 s past the lease by its own clock took over a live lease")

	old := claimAt(newRef(), now.Add(-time.Hour), time.Minute, 24*time.Hour)
	writeHashClaim(t, client, st, old)
	key := st.Key(old.UserID, old.Key)
	next := claimAt(withOwner(old.Ref), now.Add(-time.Hour+2*time.Minute), time.Minute, 2*time.Hour)
	res, err = st.Claim(ctx, next)
	require.NoError(t, err)
	require.True(t, res.Claimed, "the lease ran out")
	require.Equal(t, "string", client.Type(ctx, key).Val(), "the record taken over is in the string layout")
	rec, err := redisstore.DecodeRecord(client.Get(ctx, key).Val())
	require.NoError(t, err)
	require.Equal(t, next.Owner, rec.Owner)
	require.InDelta(t, (2 * time.Hour).Seconds(), client.PTTL(ctx, key).Val().Seconds(), 5, "the new record's time to live")

	err = st.Complete(ctx, idempotency.Completion{Ref: old.Ref, Response: idempotency.StoredResponse{StatusCode: 200}, Now: next.Now, ExpiresAt: next.ExpiresAt})
	require.ErrorIs(t, err, idempotency.ErrLeaseLost, "the old owner lost the record")
	require.NoError(t, st.Complete(ctx, idempotency.Completion{Ref: next.Ref, Response: idempotency.StoredResponse{StatusCode: 200}, Now: next.Now, ExpiresAt: next.ExpiresAt}))
}

// TestForeignTypes: a hash that is no record, or a value of another type,
// under the prefix is a store error that says so, and is left alone.
func TestForeignTypes(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	for name, write := range map[string]func(key string) error{
		"hash without status": func(key string) error { return client.HSet(ctx, key, "name", "x").Err() },
		"list":                func(key string) error { return client.RPush(ctx, key, "x").Err() },
	} {
		t.Run(name, func(t *testing.T) {
			c := claimAt(newRef(), time.Now(), time.Minute, time.Hour)
			key := st.Key(c.UserID, c.Key)
			require.NoError(t, write(key))
			typ := client.Type(ctx, key).Val()

			_, err := st.Claim(ctx, c)
			se := requireStoreError(t, err, "claim")
			require.Contains(t, se.Error(), "KeyPrefix")
			// Complete and Release write nothing: on a hash without a status
			// they find no claim of the caller's (ErrLeaseLost), as the hash
			// layout's store did; on another type they fail.
			err = st.Complete(ctx, idempotency.Completion{Ref: c.Ref, Now: c.Now, ExpiresAt: c.ExpiresAt})
			if typ == "hash" {
				require.ErrorIs(t, err, idempotency.ErrLeaseLost)
				require.ErrorIs(t, st.Release(ctx, c.Ref), idempotency.ErrLeaseLost)
			} else {
				se = requireStoreError(t, err, "complete")
				require.Contains(t, se.Error(), "KeyPrefix")
				requireStoreError(t, st.Release(ctx, c.Ref), "release")
			}
			require.Equal(t, typ, client.Type(ctx, key).Val(), "left alone")
		})
	}
}

// TestHashLayoutRenew: a hash record's owner renews its lease with the new
// store (the lease moves, the key lives on to cover it, and the record stays
// a hash), and a stranger's renewal changes nothing.
func TestHashLayoutRenew(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := redisstore.New(client, nil)
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)
	c := claimAt(newRef(), now, time.Minute, 10*time.Minute)
	writeHashClaim(t, client, st, c)
	key := st.Key(c.UserID, c.Key)

	renewed := now.Add(20 * time.Minute)
	require.ErrorIs(t, st.Renew(ctx, idempotency.Renewal{Ref: withOwner(c.Ref), Now: now, LeaseUntil: renewed}), idempotency.ErrLeaseLost)
	require.Equal(t, c.LeaseUntil.UnixMicro(), mustInt(t, client.HGet(ctx, key, "lease_until").Val()))

	require.NoError(t, st.Renew(ctx, idempotency.Renewal{Ref: c.Ref, Now: now, LeaseUntil: renewed}))
	require.Equal(t, "hash", client.Type(ctx, key).Val())
	require.Equal(t, renewed.UnixMicro(), mustInt(t, client.HGet(ctx, key, "lease_until").Val()))
	require.Equal(t, renewed.UnixMicro(), mustInt(t, client.HGet(ctx, key, "expires_at").Val()), "expires at follows a lease past it")
	require.InDelta(t, (20 * time.Minute).Seconds(), client.PTTL(ctx, key).Val().Seconds(), 5)

	res, err := st.Claim(ctx, claimAt(withOwner(c.Ref), now.Add(15*time.Minute), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed, "the renewed lease protects the record past its first lease and TTL")
}

func mustInt(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
