package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// A server that has SET … IFEQ (Valkey 8.1 and later, Redis 8.4 and later)
// completes a record with one native command:
//
//	SET <key> <completed record> IFEQ <the in-progress record as written> PX <ttl ms>
//
// It writes only when the key still holds, byte for byte, the in-progress
// record this store wrote for the run: a value that carries the run's
// owner token and the in-progress status, so the write is fenced as the
// complete script fences it, at the cost of a plain SET instead of a
// script's (3–4 µs of server time against 9–15 in BenchmarkComplete). The store remembers
// the bytes of each run's record from its claim (and follows its renewals)
// in pending; a run it does not remember, a record whose bytes differ (its
// lease moved by a renewal this store did not see) and a server without
// IFEQ go to the script, which decides as before. The first IFEQ a server
// refuses as a syntax error turns the native path off for the Store's
// life.

// Values of Store.native.
const (
	nativeUnknown int32 = iota // not tried yet
	nativeOn                   // the server has SET … IFEQ
	nativeOff                  // the server refused it: the script only
)

// maxPending bounds how many runs' records a Store remembers. A run that is
// never completed nor released (its process went on after it) stays until its
// record's expiry, or until the table is full and swept. Past the bound, new
// runs are not remembered and complete through the script.
const maxPending = 16384

// pendingID names a run's record: its key and its owner token.
type pendingID struct{ key, owner string }

// pendingRecord is the in-progress record a run's claim (or its last
// renewal) left at its key, as written, and when that record expires.
type pendingRecord struct {
	value   []byte
	expires int64 // Unix µs
}

// pendingRuns is the table of the runs in progress through a Store.
type pendingRuns struct {
	mu sync.Mutex
	m  map[pendingID]pendingRecord
}

// put remembers the record value that a claim wrote for owner at key.
func (p *pendingRuns) put(key, owner string, value []byte, expires time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = make(map[pendingID]pendingRecord)
	}
	if len(p.m) >= maxPending {
		now := time.Now().UnixMicro()
		for id, r := range p.m {
			if r.expires <= now {
				delete(p.m, id)
			}
		}
		if len(p.m) >= maxPending {
			return
		}
	}
	p.m[pendingID{key, owner}] = pendingRecord{value: value, expires: expires.UnixMicro()}
}

// take returns and forgets the record remembered for owner at key.
func (p *pendingRuns) take(key, owner string) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := pendingID{key, owner}
	r, ok := p.m[id]
	if ok {
		delete(p.m, id)
	}
	return r.value, ok
}

// forget drops what is remembered for owner at key.
func (p *pendingRuns) forget(key, owner string) {
	p.mu.Lock()
	delete(p.m, pendingID{key, owner})
	p.mu.Unlock()
}

// renewed follows a renewal that the renew script made: the lease field of
// the remembered record is lease (Unix µs), and so is its expiry when the
// lease reaches past it, as renew.lua writes them.
func (p *pendingRuns) renewed(key, owner string, lease int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	id := pendingID{key, owner}
	r, ok := p.m[id]
	if !ok {
		return
	}
	// The value may be on its way to the server in a completion that races
	// this renewal: change a copy.
	v := append([]byte(nil), r.value...)
	binary.BigEndian.PutUint64(v[offLease:], uint64(lease))
	if lease > int64(binary.BigEndian.Uint64(v[offExpires:])) {
		binary.BigEndian.PutUint64(v[offExpires:], uint64(lease))
		r.expires = lease
	}
	r.value = v
	p.m[id] = r
}

// completedRecord returns the completed record that the complete script
// would write over the in-progress record cur: cur's created at, request
// hash and owner token, with the head (version, status, flags), times
// (lease zero, expires at, status code: fixedLen-offLease bytes), headers
// (and origin) and body of the response.
func completedRecord(cur []byte, head, times, headers []byte, body string) ([]byte, bool) {
	if len(cur) < minRecordLen {
		return nil, false
	}
	end := fixedLen + 2 + int(binary.BigEndian.Uint16(cur[fixedLen:]))
	if end+2 > len(cur) {
		return nil, false
	}
	end += 2 + int(binary.BigEndian.Uint16(cur[end:]))
	if end > len(cur) {
		return nil, false
	}
	b := make([]byte, 0, end+len(headers)+len(body))
	b = append(b, head...)
	b = append(b, cur[offCreated:offLease]...)
	b = append(b, times...)
	b = append(b, cur[fixedLen:end]...)
	b = append(b, headers...)
	return append(b, body...), true
}

// completeNative tries the completion as one SET … IFEQ against the record
// the run's claim wrote. done reports that the record is completed; when it
// is false and err is nil, the caller runs the complete script, which
// decides (the record changed, or the server has no IFEQ).
func (s *Store) completeNative(ctx context.Context, key, owner string, head, times, headers []byte, body string, ttl int64) (done bool, err error) {
	cur, ok := s.pending.take(key, owner)
	if !ok {
		return false, nil
	}
	value, ok := completedRecord(cur, head, times, headers, body)
	if !ok {
		return false, nil
	}
	set := redis.NewStatusCmd(ctx, "set", key, value, "ifeq", cur, "px", ttl)
	_ = s.client.Process(ctx, set)
	switch err := set.Err(); {
	case err == nil:
		s.native.CompareAndSwap(nativeUnknown, nativeOn)
		return true, nil
	case errors.Is(err, redis.Nil):
		// The key holds other bytes, or none: the script tells why.
		s.native.CompareAndSwap(nativeUnknown, nativeOn)
		return false, nil
	case redis.HasErrorPrefix(err, "syntax error") && s.native.Load() != nativeOn:
		// A server without IFEQ; nothing was written.
		s.native.Store(nativeOff)
		return false, nil
	default:
		return false, err
	}
}
