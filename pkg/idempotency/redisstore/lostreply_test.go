package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idempotencytest"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestHTTPBehaviour runs the decorator's HTTP behaviour table on Redis and
// on Valkey.
func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	onEachServer(t, func(t *testing.T, srv server) {
		idempotencytest.RunHTTPBehaviour(t, func(t *testing.T) idempotency.Store {
			return redisstore.New(srv.client(t), nil)
		})
	})
}

// TestLostClaimReply cuts the connection after Redis ran the claim script
// and before its reply arrives. The client does not retry on its own here
// (MaxRetries -1), so what is checked is the decorator's recovery: the
// request still gets its handler's answer, and its retry the replay.
func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t)
	cutter := idempotencytest.NewReplyCutter(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: cutter.Addr(), DialTimeout: time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	idempotencytest.RunLostClaimReply(t, redisstore.New(c, nil), cutter)
}
