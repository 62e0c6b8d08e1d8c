package idempotency

import "github.com/ichido/ichido/pkg/idempotency/internal/reccache"

// Defaults of LocalCache.
const (
	// DefaultCacheEntries is the most records a LocalCache keeps.
	DefaultCacheEntries = 1024
	// DefaultCacheBytes is the most memory a LocalCache's records take, by
	// their strings plus a fixed overhead each.
	DefaultCacheBytes = 8 << 20
)

// LocalCache configures a cache of completed records in the execution
// environment (a Lambda instance, a server process). It is a bounded LRU whose
// entries expire with their records. It answers a repeat from memory, with no
// store round trip, when this process completed the record. It does the same
// for a record replayed from a store that reported its expiry. Only completed
// records are cached, so the store still decides who runs. Completions written
// in the handler's own transaction are not cached: only the handler knows if
// they committed.
type LocalCache struct {
	// MaxEntries bounds the number of cached records. Defaults to 1024
	// (DefaultCacheEntries).
	MaxEntries int
	// MaxBytes bounds the memory of the cached records (their strings plus
	// a fixed overhead each); a larger record is not cached. Defaults to 8
	// MiB (DefaultCacheBytes).
	MaxBytes int
}

// newCache returns the cache c configures, nil for none.
func newCache(c *LocalCache) *reccache.Cache {
	if c == nil {
		return nil
	}
	maxEntries, maxBytes := c.MaxEntries, c.MaxBytes
	if maxEntries == 0 {
		maxEntries = DefaultCacheEntries
	}
	if maxBytes == 0 {
		maxBytes = DefaultCacheBytes
	}
	return reccache.New(maxEntries, maxBytes)
}
