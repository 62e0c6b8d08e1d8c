package taskfn

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// redisClient returns a client on REDIS_URL (redisstore.ClientFromEnv:
// rediss:// with a verified certificate, plain redis:// for a loopback host
// only). It does not connect: the first request does, and the decorator
// answers 503 while the server cannot be reached. Errors match ErrConfig.
func redisClient(url string) (redis.UniversalClient, error) {
	client, err := redisstore.ClientFromEnv(func(name string) string {
		if name == redisstore.EnvURL {
			return url
		}
		return ""
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return client, nil
}
