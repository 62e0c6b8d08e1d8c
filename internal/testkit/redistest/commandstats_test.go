package redistest_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/redistest"
)

// TestCommandStats: after CONFIG RESETSTAT, the stats hold what ran since
// (a script and its inner command each under its own name), not the
// measurement's own INFO; the server time is the script's when one ran, the
// plain commands' otherwise.
func TestCommandStats(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()

	require.NoError(t, c.ConfigResetStat(ctx).Err())
	require.NoError(t, c.Set(ctx, "a", "1", 0).Err())
	require.NoError(t, c.Get(ctx, "a").Err())
	stats, err := redistest.CommandStats(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 1.0, stats["set"].Calls)
	require.Equal(t, 1.0, stats["get"].Calls)
	require.NotContains(t, stats, "info")
	require.NotContains(t, stats, "config|resetstat")
	require.Equal(t, stats["set"].Usec+stats["get"].Usec, redistest.ServerUsec(stats))

	require.NoError(t, c.ConfigResetStat(ctx).Err())
	require.NoError(t, c.Eval(ctx, "return redis.call('SET', KEYS[1], ARGV[1])", []string{"b"}, "2").Err())
	stats, err = redistest.CommandStats(ctx, c)
	require.NoError(t, err)
	require.Equal(t, 1.0, stats["eval"].Calls)
	require.Equal(t, 1.0, stats["set"].Calls, "the script's inner command")
	require.Equal(t, stats["eval"].Usec, redistest.ServerUsec(stats), "the script's time includes its inner command's")
}
