package redisstore_test

import (
	"fmt"
	"os"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// A Lambda main builds the client once, at cold start, from REDIS_URL, and
// hands the store to the decorator in place of the PostgreSQL one.
func Example() {
	client, err := redisstore.ClientFromEnv(func(name string) string {
		if name == redisstore.EnvURL {
			return "rediss://app:secret@ichido-abc123.serverless.euw1.cache.amazonaws.com:6379"
		}
		return os.Getenv(name)
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer client.Close()
	cfg := idempotency.Config{Store: redisstore.New(client, nil)}
	fmt.Printf("%T\n", cfg.Store)
	// Output: *redisstore.Store
}

func ExampleClientFromEnv_plainTextRefused() {
	_, err := redisstore.ClientFromEnv(func(string) string { return "redis://cache.internal:6379" })
	fmt.Println(err)
	// Output: redisstore: bad Redis configuration: REDIS_URL uses redis:// (plain text) for the non-loopback host "cache.internal"; use rediss:// (TLS), which ElastiCache Serverless requires
}
