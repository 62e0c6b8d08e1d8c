package redisstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// commandHook records the commands a client sends and runs after, when
// set, once each command has its reply (or error).
type commandHook struct {
	mu    sync.Mutex
	names []string
	after func(cmd redis.Cmder, err error)
}

func (h *commandHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *commandHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *commandHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.mu.Lock()
		h.names = append(h.names, cmd.Name())
		after := h.after
		h.mu.Unlock()
		if after != nil {
			after(cmd, err)
		}
		return err
	}
}

// take returns the commands sent since the last call.
func (h *commandHook) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	names := h.names
	h.names = nil
	return names
}

// hookedStore is a store on srv, on a client of its own with a
// commandHook; other is a second client on the same server, for the hook to
// act with.
func hookedStore(t *testing.T, srv server) (st *redisstore.Store, hook *commandHook, other *redis.Client) {
	t.Helper()
	opts, err := redis.ParseURL(srv.url(t))
	require.NoError(t, err)
	c := redis.NewClient(opts)
	hook = &commandHook{}
	c.AddHook(hook)
	other = redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close(); _ = other.Close() })
	// A first command dials, so that what follows counts only the store's.
	require.NoError(t, c.Ping(context.Background()).Err())
	hook.take()
	return must.Value(redisstore.New(c, nil)), hook, other
}

// TestHotPathIsOneCommand: the claim of a new key, a replay and a
// duplicate in progress are each one SET, no script; a release is one
// script. A complete is one SET … IFEQ where the server has it (Valkey
// 8.1), and one script where it has not (Redis 7.0), after a first
// completion whose SET … IFEQ the server refused.
func TestHotPathIsOneCommand(t *testing.T) {
	t.Parallel()
	onEachServer(t, hotPathIsOneCommand)
}

func hotPathIsOneCommand(t *testing.T, srv server) {
	st, hook, other := hookedStore(t, srv)
	native := hasIFEQ(t, other)
	if srv.name == "valkey" {
		require.True(t, native, "the Valkey of the tests has SET … IFEQ")
	}
	ctx := context.Background()
	now := time.Now().Add(-time.Hour)
	c := claimAt(newRef(), now, time.Minute, 24*time.Hour)
	complete := func(ref idemstore.Ref) {
		t.Helper()
		require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(24 * time.Hour)}))
	}

	res, err := st.Claim(ctx, c)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.Equal(t, []string{"set"}, hook.take(), "the claim of a new key")

	res, err = st.Claim(ctx, claimAt(withOwner(c.Ref), now.Add(time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, []string{"set"}, hook.take(), "a duplicate in progress")

	complete(c.Ref)
	if native {
		require.Equal(t, []string{"set"}, hook.take(), "a complete")
	} else {
		require.Contains(t, [][]string{{"set", "evalsha"}, {"set", "evalsha", "eval"}}, hook.take(), "the first complete: SET … IFEQ refused, then the script")
	}

	res, err = st.Claim(ctx, claimAt(withOwner(c.Ref), now.Add(2*time.Second), time.Minute, 24*time.Hour))
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, "{}", res.Record.Response.Body)
	require.Equal(t, []string{"set"}, hook.take(), "a replay")

	r := claimAt(newRef(), now, time.Minute, 24*time.Hour)
	_, err = st.Claim(ctx, r)
	require.NoError(t, err)
	hook.take()
	require.NoError(t, st.Release(ctx, r.Ref))
	require.Contains(t, [][]string{{"evalsha"}, {"evalsha", "eval"}}, hook.take(), "a release")

	r = claimAt(newRef(), now, time.Minute, 24*time.Hour)
	_, err = st.Claim(ctx, r)
	require.NoError(t, err)
	hook.take()
	complete(r.Ref)
	if native {
		require.Equal(t, []string{"set"}, hook.take(), "a second complete")
	} else {
		require.Equal(t, []string{"evalsha"}, hook.take(), "a second complete: the script alone")
	}
}

// abandoned writes a claim whose lease ran out by the real clock, and
// returns the claim of a newcomer that takes it over.
func abandoned(t *testing.T, st *redisstore.Store) (old, next idemstore.Claim) {
	t.Helper()
	now := time.Now()
	old = claimAt(newRef(), now.Add(-time.Hour), time.Minute, 24*time.Hour)
	res, err := st.Claim(context.Background(), old)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	return old, claimAt(withOwner(old.Ref), now, time.Minute, 24*time.Hour)
}

// afterFirst runs f once, after the first command named name.
func afterFirst(hook *commandHook, name string, f func()) {
	var once sync.Once
	hook.after = func(cmd redis.Cmder, _ error) {
		if cmd.Name() == name {
			once.Do(f)
		}
	}
}

// TestTakeover: a record the caller's clock says is abandoned goes through
// the takeover script, which writes the caller's record.
func TestTakeover(t *testing.T) {
	t.Parallel()
	st, hook, _ := hookedStore(t, servers[0])
	ctx := context.Background()
	old, next := abandoned(t, st)
	hook.take()

	res, err := st.Claim(ctx, next)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	names := hook.take()
	require.Equal(t, "set", names[0])
	require.Contains(t, [][]string{{"evalsha"}, {"evalsha", "eval"}}, names[1:], "the takeover script")
	rec, err := storedRecord(ctx, st, old.Ref)
	require.NoError(t, err)
	require.Equal(t, next.Owner, rec.Owner)
	require.True(t, next.Now.Truncate(time.Microsecond).Equal(rec.CreatedAt))
	require.ErrorIs(t, st.Release(ctx, old.Ref), idemstore.ErrLeaseLost, "the old owner lost it")
}

// TestTakeoverKeyVanished: the key expires (here: is deleted) between the
// claim's SET and the takeover script; the script writes the caller's
// record as the SET would have.
func TestTakeoverKeyVanished(t *testing.T) {
	t.Parallel()
	st, hook, other := hookedStore(t, servers[0])
	ctx := context.Background()
	old, next := abandoned(t, st)
	key := st.Key(old.UserID, old.Key)
	afterFirst(hook, "set", func() { require.NoError(t, other.Del(ctx, key).Err()) })

	res, err := st.Claim(ctx, next)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	rec, err := storedRecord(ctx, st, old.Ref)
	require.NoError(t, err)
	require.Equal(t, next.Owner, rec.Owner)
	require.InDelta(t, (24 * time.Hour).Seconds(), other.PTTL(ctx, key).Val().Seconds(), 5)
}

// TestTakeoverRaced: another caller takes the record over between the
// claim's SET and its takeover script; the script finds that caller's live
// record and the claim answers with it.
func TestTakeoverRaced(t *testing.T) {
	t.Parallel()
	st, hook, other := hookedStore(t, servers[0])
	ctx := context.Background()
	old, next := abandoned(t, st)
	rival := next
	rival.Ref = withOwner(old.Ref)
	afterFirst(hook, "set", func() {
		res, err := must.Value(redisstore.New(other, nil)).Claim(ctx, rival)
		require.NoError(t, err)
		require.True(t, res.Claimed)
	})

	res, err := st.Claim(ctx, next)
	require.NoError(t, err)
	require.False(t, res.Claimed, "one winner")
	require.Equal(t, rival.Owner, res.Record.Owner)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
}

// withOwner is r with another owner token: a rival's or a stranger's.
func withOwner(r idemstore.Ref) idemstore.Ref {
	r.Owner = uuid.NewString()
	return r
}
