package idempotency

import (
	"container/list"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Defaults of LocalCache.
const (
	// DefaultCacheEntries is the most records a LocalCache keeps.
	DefaultCacheEntries = 1024
	// DefaultCacheBytes is the most memory a LocalCache's records take, by
	// the count of cacheEntryOverhead plus their strings.
	DefaultCacheBytes = 8 << 20
)

// LocalCache configures a cache of completed records in the execution
// environment (a Lambda instance, a server process), a bounded LRU whose
// entries expire with their records: a repeat of a request whose record
// this process completed, or replayed from a store that reported its
// expiry, is answered from memory with no store round trip. Only completed
// records are cached, so the store still decides who runs; completions
// written in the handler's own transaction are not cached, since only the
// handler knows whether they committed.
type LocalCache struct {
	// MaxEntries bounds the number of cached records. Defaults to 1024
	// (DefaultCacheEntries).
	MaxEntries int
	// MaxBytes bounds the memory of the cached records (their strings plus
	// a fixed overhead each); a larger record is not cached. Defaults to 8
	// MiB (DefaultCacheBytes).
	MaxBytes int
}

// cacheEntryOverhead is what one entry costs besides its strings: the list
// element, the map slot, the entry struct and the headers map. Measured in
// BenchmarkLocalCacheMemory (about 600 bytes with two headers), rounded up.
const cacheEntryOverhead = 640

// recordCache is the LRU behind LocalCache. It is safe for concurrent use.
type recordCache struct {
	maxEntries, maxBytes int

	mu    sync.Mutex
	bytes int
	order *list.List // front: most recently used; values are *cacheEntry
	index map[cacheKey]*list.Element
}

type cacheKey struct{ userID, key string }

// cacheEntry is one completed record. It expires at the earlier of two
// instants: expiresAt read on Config.Clock (the record's own expiry, as the
// store keeps it), and the same time left counted on the process's
// monotonic clock from when the entry was stored (deadline), so that an
// injected clock, or a wall clock set back, never keeps an entry alive past
// its record.
type cacheEntry struct {
	id          cacheKey
	requestHash string
	raw         rawDigest // of the request whose fingerprint is requestHash; may be zero
	response    idemstore.Response
	expiresAt   time.Time
	deadline    time.Time // time.Now()-based: carries the monotonic reading
	size        int
}

func newRecordCache(c *LocalCache) *recordCache {
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
	return &recordCache{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), index: map[cacheKey]*list.Element{}}
}

// get returns the live entry of (userID, key) at now (Config.Clock), and
// removes one that has expired.
func (c *recordCache) get(userID, key string, now time.Time) (cacheEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[cacheKey{userID, key}]
	if !ok {
		return cacheEntry{}, false
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.expiresAt) || !time.Now().Before(e.deadline) {
		c.remove(el)
		return cacheEntry{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

// hashOf returns the fingerprint of the request whose raw digest is raw
// when the entry of (userID, key) was stored for that very request. The
// answer is a function of raw alone, so an entry's age does not matter here
// (the claim checks it); a zero raw is never matched.
func (c *recordCache) hashOf(userID, key string, raw rawDigest) (string, bool) {
	if raw == (rawDigest{}) {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[cacheKey{userID, key}]
	if !ok {
		return "", false
	}
	e := el.Value.(*cacheEntry)
	if e.raw != raw {
		return "", false
	}
	return e.requestHash, true
}

// put keeps the completed record of (userID, key), whose expiry is
// expiresAt on Config.Clock, now being that clock's current time; raw is
// the raw digest of a request whose fingerprint is requestHash, or zero.
// The oldest entries make room; a record that alone exceeds the bytes
// bound, or has expired already, is not kept.
func (c *recordCache) put(userID, key, requestHash string, raw rawDigest, resp idemstore.Response, now, expiresAt time.Time) {
	left := expiresAt.Sub(now)
	if left <= 0 {
		return
	}
	e := &cacheEntry{
		id:          cacheKey{userID, key},
		requestHash: requestHash,
		raw:         raw,
		response:    resp,
		expiresAt:   expiresAt,
		deadline:    time.Now().Add(left),
	}
	e.size = cacheEntryOverhead + len(userID) + len(key) + len(requestHash) + len(resp.Body)
	for name, value := range resp.Headers {
		e.size += len(name) + len(value)
	}
	if e.size > c.maxBytes {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.index[e.id]; ok {
		c.remove(el)
	}
	c.index[e.id] = c.order.PushFront(e)
	c.bytes += e.size
	for c.order.Len() > c.maxEntries || c.bytes > c.maxBytes {
		c.remove(c.order.Back())
	}
}

// remove drops el; c.mu is held.
func (c *recordCache) remove(el *list.Element) {
	e := c.order.Remove(el).(*cacheEntry)
	delete(c.index, e.id)
	c.bytes -= e.size
}
