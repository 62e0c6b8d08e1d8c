package taskfn

import (
	"context"

	"github.com/ichido/ichido/pkg/idempotency"
)

// newRedisStore returns the Redis idempotency store for url and a function
// that closes its client.
func newRedisStore(_ context.Context, _ string) (idempotency.Store, func(), error) {
	return nil, nil, ErrRedisUnavailable
}
