package redisstore_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/redistest"
)

func BenchmarkZZSetProcess(b *testing.B) {
	c := redistest.NewClient(b)
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "zz:" + uuid.NewString()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		set := redis.NewStringCmd(ctx, "set", keys[i], "value-of-the-claim", "nx", "px", 60000, "get")
		_ = c.Process(ctx, set)
		if _, err := set.Result(); err != redis.Nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkZZSetPipeline(b *testing.B) {
	c := redistest.NewClient(b)
	ctx := context.Background()
	keys := make([]string, b.N)
	for i := range keys {
		keys[i] = "zz:" + uuid.NewString()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		set := redis.NewStringCmd(ctx, "set", keys[i], "value-of-the-claim", "nx", "px", 60000, "get")
		p := c.Pipeline()
		_ = p.Process(ctx, set)
		_, _ = p.Exec(ctx)
		if _, err := set.Result(); err != redis.Nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkZZPing(b *testing.B) {
	c := redistest.NewClient(b)
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		_ = c.Ping(ctx).Err()
	}
}
