package redisstore_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestMain gives the Examples the REDIS_URL a user's program would read (the
// shared test server), then runs the tests and stops the server.
func TestMain(m *testing.M) {
	u, err := redistest.SharedURL()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Setenv(redisstore.EnvURL, u)
	redistest.Main(m)
}

// newBrokenStore returns a store whose client points at a port nothing
// listens on.
func newBrokenStore(t *testing.T) idemstore.Store {
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return must.Value(redisstore.New(c, nil))
}

// newMisconfiguredStore returns a store that logs in as an ACL user of its
// own which may only PING: every command of the store is refused with
// NOPERM.
func newMisconfiguredStore(t *testing.T) idemstore.Store {
	admin := redistest.NewClient(t)
	ctx := context.Background()
	user := "nogrant-" + uuid.NewString()
	require.NoError(t, admin.Do(ctx, "ACL", "SETUSER", user, "on", ">secret", "~*", "-@all", "+ping", "+hello", "+client").Err())
	t.Cleanup(func() { _ = admin.Do(context.Background(), "ACL", "DELUSER", user).Err() })
	opts := *admin.Options()
	opts.Username, opts.Password = user, "secret"
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	return must.Value(redisstore.New(c, nil))
}

// tooLargeBody is the body the conformance suite's stores refuse: their
// largest record is set just below it.
const tooLargeBody = 2 << 20

// server is one of the servers the store is tested on.
type server struct {
	name string
	url  func(testing.TB) string
}

// servers: Debian's Redis 7.0, where the store completes a record with its
// script, and Valkey 8.1, where it completes with SET … IFEQ.
var servers = []server{
	{"redis", redistest.URL},
	{"valkey", redistest.ValkeyURL},
}

// client returns a client of its own on srv, closed when t ends.
func (srv server) client(t testing.TB) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(srv.url(t))
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// onEachServer runs f as a parallel subtest on each server.
func onEachServer(t *testing.T, f func(t *testing.T, srv server)) {
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			t.Parallel()
			f(t, srv)
		})
	}
}

// hasIFEQ reports whether the server of c has SET … IFEQ.
func hasIFEQ(t testing.TB, c *redis.Client) bool {
	t.Helper()
	err := c.Do(context.Background(), "SET", "ifeq-probe:"+uuid.NewString(), "v", "IFEQ", "w").Err()
	switch {
	case errors.Is(err, redis.Nil):
		return true
	case err != nil && strings.Contains(err.Error(), "syntax error"):
		return false
	default:
		t.Fatalf("SET … IFEQ on a missing key answered %v", err)
		return false
	}
}

func TestConformance(t *testing.T) {
	t.Parallel()
	onEachServer(t, func(t *testing.T, srv server) {
		storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
			return must.Value(redisstore.New(srv.client(t), &redisstore.Options{MaxRecordBytes: tooLargeBody}))
		}, NewBrokenStore: newBrokenStore, NewMisconfiguredStore: newMisconfiguredStore, TooLargeBody: tooLargeBody,
			NewWithPrefix: func(t *testing.T, prefix string) idemstore.Store {
				return must.Value(redisstore.New(srv.client(t), &redisstore.Options{KeyPrefix: prefix}))
			}})
	})
}

// TestConformanceFromEnv runs the suite through the client ClientFromEnv
// builds, with its Lambda-sized pool and timeouts.
func TestConformanceFromEnv(t *testing.T) {
	t.Parallel()
	url := redistest.URL(t)
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		c, err := redisstore.ClientFromEnv(func(string) string { return url })
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		return must.Value(redisstore.New(c, &redisstore.Options{KeyPrefix: "env-test:"}))
	}})
}

func newRef() idemstore.Ref {
	return idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
}

func claimAt(r idemstore.Ref, now time.Time, lease, ttl time.Duration) idemstore.Claim {
	return idemstore.Claim{Ref: r, Fingerprint: "h", Now: now, LeaseUntil: now.Add(lease), ExpiresAt: now.Add(ttl)}
}

// requireStoreError checks that err is a *idemstore.Error of op.
func requireStoreError(t *testing.T, err error, op string) *idemstore.Error {
	t.Helper()
	var se *idemstore.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, op, se.Op)
	return se
}

func TestStoppedServer(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	st := must.Value(redisstore.New(c, nil))
	ctx := context.Background()
	claim := claimAt(newRef(), time.Now(), 30*time.Second, time.Hour)
	res, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.True(t, res.Claimed)

	srv.Stop()
	_, err = st.Claim(ctx, claim)
	requireStoreError(t, err, "claim")
	err = st.Complete(ctx, idemstore.Completion{Ref: claim.Ref, Response: idemstore.Response{StatusCode: 201}, Now: claim.Now, ExpiresAt: claim.ExpiresAt})
	requireStoreError(t, err, "complete")
	require.NotErrorIs(t, err, idemstore.ErrLeaseLost)
	requireStoreError(t, st.Release(ctx, claim.Ref), "release")
}

func TestDeadlineIsStoreError(t *testing.T) {
	t.Parallel()
	c, err := redisstore.ClientFromEnv(func(string) string { return redistest.URL(t) })
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	st := must.Value(redisstore.New(c, nil))
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = st.Claim(ctx, claimAt(newRef(), time.Now(), time.Second, time.Hour))
	requireStoreError(t, err, "claim")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// TestKeyExpiry checks the key's TTL: while in progress it covers the later
// of the lease and ExpiresAt; once completed it ends at the completion's
// ExpiresAt. The store's times here follow the real clock, since Redis
// expires keys by its own.
func TestKeyExpiry(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := must.Value(redisstore.New(client, nil))
	ctx := context.Background()

	// requirePTTL checks that the key expires at want, give or take the
	// time the test took to get here and the server's cached clock (Redis
	// reads its clock once per event loop iteration).
	requirePTTL := func(t *testing.T, key string, want time.Time) {
		t.Helper()
		left := time.Until(want)
		ttl, err := client.PTTL(ctx, key).Result()
		require.NoError(t, err)
		require.LessOrEqual(t, ttl, left+100*time.Millisecond, "the key must not outlive its expiry")
		require.Greater(t, ttl, left-10*time.Second, "PTTL %s, want about %s", ttl, left)
	}

	for name, tc := range map[string]struct{ lease, ttl time.Duration }{
		"TTL longer than the lease": {30 * time.Second, 24 * time.Hour},
		"lease longer than the TTL": {2 * time.Hour, time.Hour},
	} {
		t.Run(name, func(t *testing.T) {
			now := time.Now()
			c := claimAt(newRef(), now, tc.lease, tc.ttl)
			res, err := st.Claim(ctx, c)
			require.NoError(t, err)
			require.True(t, res.Claimed)
			key := st.Key(c.UserID, c.Key)
			requirePTTL(t, key, now.Add(max(tc.lease, tc.ttl)))

			done := idemstore.Completion{Ref: c.Ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"},
				Now: now.Add(time.Second), ExpiresAt: now.Add(time.Second + 90*time.Minute)}
			require.NoError(t, st.Complete(ctx, done))
			requirePTTL(t, key, done.ExpiresAt)

			rec, err := storedRecord(ctx, st, c.Ref)
			require.NoError(t, err)
			require.True(t, rec.LeaseUntil.IsZero(), "a completed record has no lease")
		})
	}
}

// TestKeyLivesForItsTTL: Redis drops a key by its own clock, so each write
// sets the key's time to live, not an instant of the caller's clock: a
// caller whose clock runs far behind does not see its record vanish at
// once, and one whose clock runs ahead gets the same time to live.
func TestKeyLivesForItsTTL(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := must.Value(redisstore.New(client, nil))
	ctx := context.Background()
	for name, now := range map[string]time.Time{
		"behind": time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC),
		"ahead":  time.Now().Add(30 * time.Minute),
	} {
		c := claimAt(newRef(), now, time.Minute, time.Hour)
		res, err := st.Claim(ctx, c)
		require.NoError(t, err)
		require.True(t, res.Claimed, name)
		ttl := client.PTTL(ctx, st.Key(c.UserID, c.Key)).Val()
		require.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5, "%s: the key's time to live", name)
		require.NoError(t, st.Release(ctx, c.Ref), name)
	}
}

// TestRecordLayout pins the key name (prefix, hash tag per record) and the
// record format, byte for byte, as the package comment describes it.
func TestRecordLayout(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	ctx := context.Background()
	now := time.Date(2100, 1, 1, 0, 0, 0, 123456789, time.UTC)

	def := must.Value(redisstore.New(client, nil))
	ref := newRef()
	require.Equal(t, "ichido:idem:{"+ref.UserID+":"+ref.Key+"}", def.Key(ref.UserID, ref.Key))

	st := must.Value(redisstore.New(client, &redisstore.Options{KeyPrefix: "layout:"}))
	key := st.Key(ref.UserID, ref.Key)
	require.Equal(t, "layout:{"+ref.UserID+":"+ref.Key+"}", key)
	c := claimAt(ref, now, time.Minute, time.Hour)
	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.Equal(t, now.Truncate(time.Microsecond), res.Record.CreatedAt, "times keep microseconds")
	require.Zero(t, client.Exists(ctx, def.Key(ref.UserID, ref.Key)).Val(), "the prefix separates stores")
	require.Equal(t, "string", client.Type(ctx, key).Val())

	u64 := func(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixMicro())) }
	str16 := func(s string) []byte { return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...) }
	str32 := func(s string) []byte { return append(binary.BigEndian.AppendUint32(nil, uint32(len(s))), s...) }
	cat := func(parts ...[]byte) string { return string(bytes.Join(parts, nil)) }

	require.Equal(t, cat(
		[]byte{1, 'p', 0}, u64(now), u64(now.Add(time.Minute)), u64(now.Add(time.Hour)), []byte{0, 0, 0, 0},
		str16("h"), str16(ref.Owner), []byte{0, 0},
	), client.Get(ctx, key).Val(), "the in-progress record")

	body := "{\"a\": 1}\x00\xff raw"
	done := now.Add(2 * time.Hour)
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Now: now, ExpiresAt: done,
		Response: idemstore.Response{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: body, IsBase64Encoded: true}}))
	require.Equal(t, cat(
		[]byte{1, 'c', 1}, u64(now), make([]byte, 8), u64(done), []byte{0, 0, 0, 201},
		str16("h"), str16(ref.Owner), []byte{0, 1}, str32("Content-Type"), str32("application/json"), []byte(body),
	), client.Get(ctx, key).Val(), "the completed record: the claim's times, hash and owner, then the response, the raw body last")
}

// TestReplayByteForByte round-trips bodies and headers that a JSON or text
// store would alter.
func TestReplayByteForByte(t *testing.T) {
	t.Parallel()
	st := must.Value(redisstore.New(redistest.NewClient(t), nil))
	ctx := context.Background()
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	for name, resp := range map[string]idemstore.Response{
		"json":                  {StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json", "Location": "/tasks/1"}, Body: `{ "b":1, "a" : [1.0, 2e3] }`},
		"not json":              {StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: "plain text\r\n"},
		"empty":                 {StatusCode: 204},
		"unicode":               {StatusCode: 200, Body: "日本語 \U0001F600 e\u0301"},
		"NUL bytes":             {StatusCode: 200, Body: "\x00a\x00\x00"},
		"invalid UTF-8":         {StatusCode: 200, Body: "\xff\xfe\xc3\x28"},
		"base64 flag":           {StatusCode: 200, Body: "AAEC", IsBase64Encoded: true},
		"header invalid UTF-8":  {StatusCode: 200, Headers: map[string]string{"X-Raw": "\xff\x00", "Content-Type": "text/plain"}, Body: "x"},
		"header NUL and quotes": {StatusCode: 200, Headers: map[string]string{"X-Odd": "a\x00\"b\\"}},
	} {
		t.Run(name, func(t *testing.T) {
			c := claimAt(newRef(), now, time.Minute, time.Hour)
			_, err := st.Claim(ctx, c)
			require.NoError(t, err)
			require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: c.Ref, Response: resp, Now: now, ExpiresAt: now.Add(time.Hour)}))
			other := c
			other.Owner = uuid.NewString()
			res, err := st.Claim(ctx, other)
			require.NoError(t, err)
			require.False(t, res.Claimed)
			require.NotNil(t, res.Record.Response)
			got := *res.Record.Response
			require.Equal(t, []byte(resp.Body), []byte(got.Body))
			require.Equal(t, resp.StatusCode, got.StatusCode)
			require.Equal(t, resp.IsBase64Encoded, got.IsBase64Encoded)
			require.Equal(t, len(resp.Headers), len(got.Headers))
			for k, v := range resp.Headers {
				require.Equal(t, []byte(v), []byte(got.Headers[k]), "header %q", k)
			}
		})
	}
}

// TestScriptsReloaded checks the EVAL fallback: after SCRIPT FLUSH (a
// restarted or failed-over server) the scripts still run.
func TestScriptsReloaded(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = client.Close() })
	st := must.Value(redisstore.New(client, nil))
	ctx := context.Background()
	now := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)

	c := claimAt(newRef(), now, time.Minute, time.Hour)
	_, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.NoError(t, client.ScriptFlush(ctx).Err())
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: c.Ref, Response: idemstore.Response{StatusCode: 200}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	require.NoError(t, client.ScriptFlush(ctx).Err())
	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	require.NoError(t, client.ScriptFlush(ctx).Err())
	require.ErrorIs(t, st.Release(ctx, c.Ref), idemstore.ErrLeaseLost)
}

// TestForeignValueIsStoreError checks that a value under the prefix that is
// not a record (a string of another format, a hash such as a record kept one
// field per hash field, a list) fails every operation as a store error that
// names Options.KeyPrefix, and is left alone.
func TestForeignValueIsStoreError(t *testing.T) {
	t.Parallel()
	client := redistest.NewClient(t)
	st := must.Value(redisstore.New(client, nil))
	ctx := context.Background()
	for name, write := range map[string]func(key string) error{
		"string": func(key string) error { return client.Set(ctx, key, "not a record", time.Minute).Err() },
		"hash": func(key string) error {
			return client.HSet(ctx, key, "status", "in_progress", "owner", "o", "expires_at", "4102444800000000").Err()
		},
		"list": func(key string) error { return client.RPush(ctx, key, "x").Err() },
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			c := claimAt(newRef(), time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC), time.Minute, time.Hour)
			key := st.Key(c.UserID, c.Key)
			require.NoError(t, write(key))
			typ := client.Type(ctx, key).Val()
			dump := client.Dump(ctx, key).Val()

			_, err := st.Claim(ctx, c)
			se := requireStoreError(t, err, "claim")
			require.Contains(t, se.Error(), "KeyPrefix")
			se = requireStoreError(t, st.Complete(ctx, idemstore.Completion{Ref: c.Ref, Now: c.Now, ExpiresAt: c.ExpiresAt}), "complete")
			require.Contains(t, se.Error(), "KeyPrefix")
			requireStoreError(t, st.Release(ctx, c.Ref), "release")
			requireStoreError(t, st.Renew(ctx, idemstore.Renewal{Ref: c.Ref, Now: c.Now, LeaseUntil: c.LeaseUntil.Add(time.Minute)}), "renew")
			require.Equal(t, typ, client.Type(ctx, key).Val(), "left alone")
			require.Equal(t, dump, client.Dump(ctx, key).Val(), "left alone")
		})
	}
}

// TestCluster runs the suite through a cluster client on a one-node
// cluster holding every slot, and checks that a record's slot is that of
// its user and key together (the hash tag), so that one user's records
// spread over the slots.
func TestCluster(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	ctx := context.Background()
	node := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = node.Close() })
	require.NoError(t, node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", "0", "16383").Err())
	require.Eventually(t, func() bool {
		info, err := node.ClusterInfo(ctx).Result()
		return err == nil && strings.Contains(info, "cluster_state:ok")
	}, 30*time.Second, 50*time.Millisecond, "the one-node cluster never became ok")

	st := must.Value(redisstore.New(node, nil))
	user := uuid.NewString()
	seen := map[int64]bool{}
	for range 20 {
		key := uuid.NewString()
		want, err := node.ClusterKeySlot(ctx, user+":"+key).Result()
		require.NoError(t, err)
		slot, err := node.ClusterKeySlot(ctx, st.Key(user, key)).Result()
		require.NoError(t, err)
		require.Equal(t, want, slot, "a record hashes by its user id and key")
		seen[slot] = true
	}
	require.Greater(t, len(seen), 15, "one user's records spread over the slots")

	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{srv.Addr}})
		t.Cleanup(func() { _ = c.Close() })
		return must.Value(redisstore.New(c, nil))
	}})
}

// storedRecord is the record of ref as the store reads it back (Get).
func storedRecord(ctx context.Context, st *redisstore.Store, ref idemstore.Ref) (idemstore.Record, error) {
	rec, found, err := st.Get(ctx, ref.UserID, ref.Key)
	if err == nil && !found {
		err = fmt.Errorf("no record for user %s key %s", ref.UserID, ref.Key)
	}
	return rec, err
}
