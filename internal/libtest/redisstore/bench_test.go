package redisstore_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// The benchmarks run one client, one call at a time, against the private
// server of package redistest. Besides ns/op they report the server's own
// time from INFO commandstats over the timed loop: server-µs/op (a
// script's time, which includes its inner commands, or else the sum of the
// plain commands) and, per command, its calls and microseconds per
// operation (a script's inner commands are counted under their own names
// too).

var benchResponse = idemstore.Response{
	StatusCode: 201,
	Headers:    map[string]string{"Content-Type": "application/json", "Location": "/tasks/1"},
	Body:       `{"id":"1","title":"write tests","done":false}`,
}

var benchHash = strings.Repeat("ab", 32)

func benchClaim(ref idemstore.Ref, now time.Time) idemstore.Claim {
	return idemstore.Claim{Ref: ref, Fingerprint: benchHash, Now: now, LeaseUntil: now.Add(12 * time.Second), ExpiresAt: now.Add(24 * time.Hour)}
}

// serverTime resets the server's command statistics; the function it
// returns reports them per operation, over n operations.
func serverTime(b *testing.B, c *redis.Client) func(n int) {
	b.Helper()
	ctx := context.Background()
	if err := c.ConfigResetStat(ctx).Err(); err != nil {
		b.Fatal(err)
	}
	return func(n int) {
		b.Helper()
		stats, err := redistest.CommandStats(ctx, c)
		if err != nil {
			b.Fatal(err)
		}
		for name, st := range stats {
			b.ReportMetric(st.Calls/float64(n), name+"-calls/op")
			b.ReportMetric(st.Usec/float64(n), name+"-µs/op")
		}
		b.ReportMetric(redistest.ServerUsec(stats)/float64(n), "server-µs/op")
	}
}

// BenchmarkPing is the floor: one round trip that does nothing.
func BenchmarkPing(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		ctx := context.Background()
		report := serverTime(b, c)
		b.ResetTimer()
		for range b.N {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b.N)
	})
}

// BenchmarkGet is the other floor: one GET of a value the size of a
// completed record.
func BenchmarkGet(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		ctx := context.Background()
		key := "bench:get:" + uuid.NewString()
		if err := c.Set(ctx, key, strings.Repeat("x", 256), time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
		report := serverTime(b, c)
		b.ResetTimer()
		for range b.N {
			if err := c.Get(ctx, key).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b.N)
	})
}

// BenchmarkClaimReplay claims a completed key with the same request: the
// store's whole work for a replay.
func BenchmarkClaimReplay(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		st := must.Value(redisstore.New(c, nil))
		ctx := context.Background()
		now := time.Now()
		first := benchClaim(idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}, now)
		if _, err := st.Claim(ctx, first); err != nil {
			b.Fatal(err)
		}
		if err := st.Complete(ctx, idemstore.Completion{Ref: first.Ref, Response: benchResponse, Now: now, ExpiresAt: first.ExpiresAt}); err != nil {
			b.Fatal(err)
		}
		retry := first
		retry.Owner = uuid.NewString()
		report := serverTime(b, c)
		b.ResetTimer()
		for range b.N {
			res, err := st.Claim(ctx, retry)
			if err != nil || res.Claimed || res.Record.Response == nil {
				b.Fatal(res, err)
			}
		}
		b.StopTimer()
		report(b.N)
	})
}

// BenchmarkClaimNew claims a new key each time: the first half of a first
// request.
func BenchmarkClaimNew(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		st := must.Value(redisstore.New(c, nil))
		ctx := context.Background()
		user := uuid.NewString()
		keys := make([]string, b.N) // the store takes UUIDs only
		for i := range keys {
			keys[i] = uuid.NewString()
		}
		now := time.Now()
		report := serverTime(b, c)
		b.ResetTimer()
		for i := range b.N {
			res, err := st.Claim(ctx, benchClaim(idemstore.Ref{UserID: user, Key: keys[i], Owner: "o"}, now))
			if err != nil || !res.Claimed {
				b.Fatal(res, err)
			}
		}
		b.StopTimer()
		report(b.N)
	})
}

// BenchmarkComplete completes keys claimed before the timed loop: the
// second half of a first request.
func BenchmarkComplete(b *testing.B) {
	onEachServerB(b, func(b *testing.B, c *redis.Client) {
		st := must.Value(redisstore.New(c, nil))
		ctx := context.Background()
		user := uuid.NewString()
		now := time.Now()
		refs := make([]idemstore.Ref, b.N)
		for i := range refs {
			refs[i] = idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: "o"}
			if _, err := st.Claim(ctx, benchClaim(refs[i], now)); err != nil {
				b.Fatal(err)
			}
		}
		report := serverTime(b, c)
		b.ResetTimer()
		for _, ref := range refs {
			if err := st.Complete(ctx, idemstore.Completion{Ref: ref, Response: benchResponse, Now: now, ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		report(b.N)
	})
}

// onEachServerB runs f as a sub-benchmark on each server, with a client of
// its own.
func onEachServerB(b *testing.B, f func(b *testing.B, c *redis.Client)) {
	for _, srv := range servers {
		b.Run(srv.name, func(b *testing.B) { f(b, srv.client(b)) })
	}
}
