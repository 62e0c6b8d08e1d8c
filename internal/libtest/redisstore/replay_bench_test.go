package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// BenchmarkWrapReplay is the decorator's replay on the store, one client:
// its allocations are the client's whole path; its time includes the
// round trip.
func BenchmarkWrapReplay(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		storekit.BenchWrapReplay(b, must.Value(redisstore.New(c, nil)))
	})
}
