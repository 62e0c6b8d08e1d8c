package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestFunctionRecordsSpreadOverShards runs a Function without a Scope,
// whose records all have one user (the function's), on a cluster of three
// shards: its records are spread over every shard rather than kept in the
// one slot of that user, and each call still replays from wherever its
// record lives.
func TestFunctionRecordsSpreadOverShards(t *testing.T) {
	t.Parallel()
	nodes := redistest.StartClusterT(t, 3)
	ctx := context.Background()
	cluster := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{nodes[0].Addr}})
	t.Cleanup(func() { _ = cluster.Close() })

	var runs atomic.Int64
	fn, err := idempotency.Function(func(_ context.Context, id string) (string, error) {
		runs.Add(1)
		return "done " + id, nil
	}, idempotency.FunctionConfig[string]{
		Store: must.Value(redisstore.New(cluster, nil)),
		Name:  "spread",
		Key:   func(_ context.Context, id string) (string, error) { return id, nil },
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	const calls = 90
	for round := range 2 {
		for i := range calls {
			out, err := fn(ctx, fmt.Sprintf("message-%d", i))
			require.NoError(t, err, "round %d", round)
			require.Equal(t, fmt.Sprintf("done message-%d", i), out)
		}
	}
	require.EqualValues(t, calls, runs.Load(), "the second round replays every call")

	total := int64(0)
	for _, n := range nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr})
		t.Cleanup(func() { _ = c.Close() })
		size, err := c.DBSize(ctx).Result()
		require.NoError(t, err)
		require.Positive(t, size, "shard %s holds none of the function's records", n.Addr)
		total += size
	}
	require.EqualValues(t, calls, total, "one record per key")
}
