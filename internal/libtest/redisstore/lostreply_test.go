package redisstore_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestHTTPBehaviour runs the decorator's HTTP behaviour table on Redis and
// on Valkey.
func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	onEachServer(t, func(t *testing.T, srv server) {
		storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: func(t *testing.T) idemstore.Store {
			return must.Value(redisstore.New(srv.client(t), nil))
		}})
	})
}

// TestLostClaimReply cuts the connection after Redis ran the claim script
// and before its reply arrives. The client does not retry on its own here
// (MaxRetries -1), so what is checked is the decorator's recovery: the
// request still gets its handler's answer, and its retry the replay.
func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t)
	storetest.Run(t, storetest.Config{Parts: storetest.LostReply, Server: srv.Addr, Through: func(t *testing.T, addr string) idemstore.Store {
		c := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		return must.Value(redisstore.New(c, nil))
	}})
}
