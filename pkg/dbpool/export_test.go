package dbpool

import "context"

// WithLookup returns cfg resolving host names with lookup, so that a test
// can connect to an endpoint name that only it knows.
func WithLookup(cfg Config, lookup func(ctx context.Context, host string) ([]string, error)) Config {
	cfg.lookup = lookup
	return cfg
}
