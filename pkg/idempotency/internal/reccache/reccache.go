// Package reccache is the local cache of completed records: a bounded
// LRU, by count and by bytes, whose entries expire with their records.
package reccache

import (
	"container/list"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Digest is a SHA-256 over a request as it arrived: two requests with equal
// digests have equal fingerprints.
type Digest [sha256.Size]byte

// entryOverhead is what one entry costs besides its strings: the list
// element, the map slot, the entry struct and the headers map; about 600
// bytes with two headers when it was measured, rounded up.
const entryOverhead = 640

// Cache is the LRU of completed records. It is safe for concurrent use.
type Cache struct {
	maxEntries, maxBytes int

	mu    sync.Mutex
	bytes int
	order *list.List // front: most recently used; values are *Entry
	index map[cacheKey]*list.Element
}

type cacheKey struct{ userID, key string }

// Entry is one completed record. It expires at the earlier of two
// instants: expiresAt read on the engine's clock (the record's own expiry, as the
// store keeps it), and the same time left counted on the process's
// monotonic clock from when the entry was stored (deadline), so that an
// injected clock, or a wall clock set back, never keeps an entry alive past
// its record.
type Entry struct {
	// Fingerprint is the record's fingerprint.
	Fingerprint string
	// Response is the record's response.
	Response idemstore.Response
	// ExpiresAt is the record's expiry on the engine's clock.
	ExpiresAt time.Time

	id       cacheKey
	raw      Digest    // of the request whose fingerprint is Fingerprint; may be zero
	deadline time.Time // time.Now()-based: carries the monotonic reading
	size     int
}

// New returns a cache of at most maxEntries records and maxBytes bytes.
func New(maxEntries, maxBytes int) *Cache {
	return &Cache{maxEntries: maxEntries, maxBytes: maxBytes, order: list.New(), index: map[cacheKey]*list.Element{}}
}

// Get returns the live entry of (userID, key) at now (the engine's clock), and
// removes one that has expired.
func (c *Cache) Get(userID, key string, now time.Time) (Entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[cacheKey{userID, key}]
	if !ok {
		return Entry{}, false
	}
	e := el.Value.(*Entry)
	if !now.Before(e.ExpiresAt) || !time.Now().Before(e.deadline) {
		c.remove(el)
		return Entry{}, false
	}
	c.order.MoveToFront(el)
	return *e, true
}

// HashOf returns the fingerprint of the request whose raw digest is raw
// when the entry of (userID, key) was stored for that very request. The
// answer is a function of raw alone, so an entry's age does not matter here
// (the claim checks it); a zero raw is never matched.
func (c *Cache) HashOf(userID, key string, raw Digest) (string, bool) {
	if raw == (Digest{}) {
		return "", false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.index[cacheKey{userID, key}]
	if !ok {
		return "", false
	}
	e := el.Value.(*Entry)
	if e.raw != raw {
		return "", false
	}
	return e.Fingerprint, true
}

// Put keeps the completed record of (userID, key), whose expiry is
// expiresAt on the engine's clock, now being that clock's current time; raw is
// the raw digest of a request whose fingerprint is fingerprint, or zero.
// The oldest entries make room; a record that alone exceeds the bytes
// bound, or has expired already, is not kept.
func (c *Cache) Put(userID, key, fingerprint string, raw Digest, resp idemstore.Response, now, expiresAt time.Time) {
	left := expiresAt.Sub(now)
	if left <= 0 {
		return
	}
	e := &Entry{
		id:          cacheKey{userID, key},
		Fingerprint: fingerprint,
		raw:         raw,
		Response:    resp,
		ExpiresAt:   expiresAt,
		deadline:    time.Now().Add(left),
	}
	e.size = entryOverhead + len(userID) + len(key) + len(fingerprint) + len(resp.Body)
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
func (c *Cache) remove(el *list.Element) {
	e := c.order.Remove(el).(*Entry)
	delete(c.index, e.id)
	c.bytes -= e.size
}
