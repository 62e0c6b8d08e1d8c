package storeenv_test

import (
	"fmt"

	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

// Kind says which store the environment names, and why a setting is wrong;
// Open builds that store (see the package documentation).
func ExampleKind() {
	for _, vars := range []map[string]string{
		{},
		{"IDEMPOTENCY_STORE": "redis", "REDIS_URL": "rediss://my-cache.serverless.euw1.cache.amazonaws.com:6379"},
		{"IDEMPOTENCY_STORE": "redis"},
	} {
		kind, err := storeenv.Kind(func(name string) string { return vars[name] })
		fmt.Printf("%q %v\n", kind, err)
	}
	// Output:
	// "postgres" <nil>
	// "redis" <nil>
	// "" storeenv: invalid idempotency store settings: storeenv: REDIS_URL: is empty but IDEMPOTENCY_STORE=redis: set it to rediss://host:port (ElastiCache, Valkey), or redis://127.0.0.1:port for a local server
}
