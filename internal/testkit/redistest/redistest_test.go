package redistest_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestStartAndStop(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := redistest.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(s.Stop)

	host, _, err := net.SplitHostPort(s.Addr)
	require.NoError(t, err)
	require.Equal(t, "127.0.0.1", host)

	opts, err := redis.ParseURL(s.URL())
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Set(ctx, "k", "v", 0).Err())
	require.Equal(t, "v", c.Get(ctx, "k").Val())

	// Persistence is off: nothing is ever written to disk.
	cfg, err := c.ConfigGet(ctx, "save").Result()
	require.NoError(t, err)
	require.Equal(t, "", cfg["save"])
	cfg, err = c.ConfigGet(ctx, "appendonly").Result()
	require.NoError(t, err)
	require.Equal(t, "no", cfg["appendonly"])

	s.Stop()
	s.Stop() // a second stop does nothing
	_, err = os.Stat(s.Dir)
	require.True(t, os.IsNotExist(err), "the server's directory is removed")
	d := net.Dialer{Timeout: time.Second}
	_, err = d.Dial("tcp", s.Addr)
	require.Error(t, err, "nothing listens after Stop")
}

func TestSharedServer(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := redistest.NewClient(t), redistest.NewClient(t)
	require.Equal(t, a.Options().Addr, b.Options().Addr, "one server per binary")
	key := "redistest:" + t.Name()
	require.NoError(t, a.Set(ctx, key, "shared", time.Minute).Err())
	require.Equal(t, "shared", b.Get(ctx, key).Val())
}

func TestURLHonoursEnvironment(t *testing.T) {
	// Not parallel: it sets an environment variable.
	t.Setenv(redistest.EnvURL, "redis://127.0.0.1:1/5")
	require.Equal(t, "redis://127.0.0.1:1/5", redistest.URL(t))
}
