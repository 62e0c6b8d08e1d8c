// Package redisstore keeps idempotency records in Redis or Valkey (Amazon
// ElastiCache), a store for growth past about 10,000 monthly active users. It
// implements the same idemstore.Store contract as package pgstore and passes
// the same conformance suite, so a handler wrapped by idempotency.Wrap does not
// change when the store does. It needs Redis 7.0 or later, or Valkey (SET with
// both NX and GET). On Valkey 8.1 or Redis 8.4 and later, a first request's
// completion is a plain command instead of a script.
//
// Each record is one string value under "<prefix>{<user_id>:<key>}". The braces
// are a hash tag that holds the whole identity of the record. So on a cluster
// (Redis Cluster, ElastiCache Serverless) records spread over every slot, even
// when they share one user. A Function without a Scope keeps all its records
// under the function's user. Every command and script touches one key. Records
// written under the earlier key name "<prefix>{<user_id>}:<key>", whose hash
// tag held the user alone, are not read.
//
// Both ids are lower-case UUIDs, and every call refuses other ids with a
// permanent error. Their fixed length makes the prefix an exact boundary: what
// precedes "{<user_id>:<key>}" is the prefix of the store that wrote the key. A
// store on "svc" never reads, writes, lists or deletes the records of "svc2" or
// "svc{eu}". List skips every key that is not the store's own or whose value is
// not a record.
//
// # Operations
//
// The claim is one plain command, no script, in the two cases that make
// the hot path, a replay and the claim of a new key:
//
//	SET <key> <caller's in-progress record> NX PX <ttl ms> GET
//
// No reply (nil) means the key was free and the caller holds it. A value is the
// stored record, decoded in Go. The caller's clock may say it is present: not
// expired, and completed or in progress with a live lease. Then the claim
// answers with it. It is a replay, a duplicate in progress or a reused key. For
// the same owner and request hash in progress, it is the caller's own claim
// again (a lost reply). Only when the caller's clock says the stored record is
// absent does the takeover script run. It reads the value again. It decides
// against the earlier of the caller's clock (Claim.Now, Unix microseconds) and
// the server's (TIME). A caller whose clock runs ahead never takes over a lease
// that is live by the server's clock. One whose clock runs behind only takes
// over later. It replaces the record atomically, or returns the live one, which
// Go answers with; a key that vanished since the SET is written as by the SET.
// An injected clock set in the past still drives every branch.
//
// Complete, Release and Renew are each one Lua script, run with EVALSHA or with
// EVAL when the server does not know it yet. The script does a GET and checks
// the status (in progress) and the owner token. Then Complete does a SET of the
// completed record, and Release a DEL. Renew overwrites the lease in place
// (SETRANGE) and raises the key's time to live to cover it (PEXPIRE GT). They
// are fenced by the owner and the status, not by the lease. Where the server
// has SET … IFEQ (Valkey 8.1 and later, Redis 8.4 and later), Complete is one
// plain command instead:
//
//	SET <key> <completed record> IFEQ <the run's in-progress record> PX <ttl ms>
//
// The store remembers the bytes of each run's in-progress record from its
// claim, and follows its own renewals. So the write happens only over that very
// record. That value holds the run's owner token and the in-progress status,
// the script's fence. When the bytes differ, nothing is written and the script
// decides: the record was taken over, or renewed where this store did not see
// it. A server that refuses IFEQ gets the script from then on.
//
// Redis itself removes expired records. Each write gives the key the record's
// time to live (PX), ExpiresAt − Now. While in progress, it is up to the later
// of ExpiresAt and the lease. It is counted on the server's clock. So a caller
// whose clock runs behind does not see its record vanish at once. One whose
// clock runs ahead by s sees it vanish s before its ExpiresAt, at the end of a
// TTL of hours. The claim's decision is always taken with the times above.
//
// # Record format
//
// A record is binary, version 1 or 2; integers are big-endian, times are
// Unix microseconds (signed, 8 bytes), offsets count from 0:
//
//	0      1 byte   format version: 2 for a completed record whose response
//	                has an origin (idemstore.Response.Origin), else 1
//	1      1 byte   status: 'p' in progress, 'c' completed
//	2      1 byte   flags: bit 0 set when the body is base64 (the handler's flag),
//	                bit 1 on the not-kept marker (idemstore.Response.NotKept)
//	3      8 bytes  created at
//	11     8 bytes  lease until (0 once completed)
//	19     8 bytes  expires at
//	27     4 bytes  status code (signed; 0 while in progress)
//	31     2 bytes  length of the request hash, then the hash
//	       2 bytes  length of the owner token, then the token
//	       2 bytes  number of headers, then for each its name and its value,
//	                each after its length (4 bytes)
//	       version 2 only, the origin: its trace id and its span id, each
//	                after its length (2 bytes), then its time (8 bytes)
//	       the rest the response body, raw bytes (empty while in progress)
//
// Version 2 is version 1 with the origin. A record without one is written in
// version 1, byte for byte as before. A reader that knows version 1 alone
// refuses a record with an origin instead of replaying it wrong.
//
// Every variable field but the last carries its length, so no byte in an owner,
// a header or a body can break the parsing. The body replays byte for byte
// whatever it holds. Decoding copies nothing: the strings of a decoded record
// share the reply's memory. A value of another version, or one too short for
// its lengths, is not a record. Nor is a key of another type, such as a hash or
// a list. The store answers with a *idemstore.Error and leaves it alone. A
// later format takes the next version number, and the project's version policy
// says what is promised across versions.
package redisstore

import (
	"cmp"
	"context"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/redis/go-redis/v9"
)

// DefaultKeyPrefix is the prefix of every record's key when
// Options.KeyPrefix is empty.
const DefaultKeyPrefix = "ichido:idem:"

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// KeyPrefix starts the key of every record, so that the records can share
	// a server with other data and be found with SCAN. The full key is
	// KeyPrefix + "{" + user id + ":" + idempotency key + "}". It is an
	// exact boundary: a store sees the records of its own prefix alone,
	// not those of a prefix that starts with it (see the package comment).
	// A prefix holding braces would make its own hash tag and put every
	// record in one cluster slot: leave braces out. Defaults to
	// "ichido:idem:".
	KeyPrefix string

	// MaxRecordBytes is the largest record Complete writes: the record format's
	// fields, the headers and the body. A larger response is refused before
	// anything is sent, with a permanent *idemstore.Error wrapping
	// idemstore.ErrTooLarge, and the record is completed with the not-kept
	// marker instead. Defaults to 511 MiB (DefaultMaxRecordBytes), under the
	// 512 MB that a Redis string and a request argument (proto-max-bulk-len)
	// hold by default. Set it to your server's limit when that is lower. A
	// server that refuses a larger value all the same answers with the same
	// error.
	MaxRecordBytes int
}

// DefaultMaxRecordBytes is the largest record a Store writes by default:
// 511 MiB, under Redis's default 512 MB limit of a string value.
const DefaultMaxRecordBytes = 511 << 20

// Store is an idemstore.Store on Redis or Valkey. It is safe for
// concurrent use.
type Store struct {
	client    redis.UniversalClient
	prefix    string
	maxRecord int

	// native says whether the server has SET … IFEQ (native.go), and
	// pending holds the in-progress records of the runs that may complete
	// with it.
	native  atomic.Int32
	pending pendingRuns
}

var _ idemstore.Store = (*Store)(nil)

// New returns a Store that keeps its records through client: a
// *redis.Client for a single endpoint (ElastiCache Serverless, the primary
// endpoint of a replication group), or a *redis.ClusterClient. The client's
// settings are left as they are; ClientFromEnv builds one suited to Lambda.
// It fails only when client is nil.
func New(client redis.UniversalClient, opts *Options) (*Store, error) {
	if client == nil {
		return nil, errors.New("redisstore: the client is nil")
	}
	prefix := DefaultKeyPrefix
	if opts != nil && opts.KeyPrefix != "" {
		prefix = opts.KeyPrefix
	}
	maxRecord := DefaultMaxRecordBytes
	if opts != nil && opts.MaxRecordBytes > 0 {
		maxRecord = opts.MaxRecordBytes
	}
	return &Store{client: client, prefix: prefix, maxRecord: maxRecord}, nil
}

// Key returns the Redis key of the record of user's idempotency key. Its
// hash tag (the part in braces) is the user and the key together, so that
// the records of one user spread over a cluster's slots.
func (s *Store) Key(userID, key string) string {
	return s.prefix + "{" + userID + ":" + key + "}"
}

//go:embed record.lua
var recordLua string

// newScript returns a script whose text starts with the record format's
// reader, record.lua.
func newScript(body string) *redis.Script { return redis.NewScript(recordLua + body) }

var (
	//go:embed takeover.lua
	takeoverLua    string
	takeoverScript = newScript(takeoverLua)

	//go:embed complete.lua
	completeLua    string
	completeScript = newScript(completeLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = newScript(releaseLua)

	//go:embed renew.lua
	renewLua    string
	renewScript = newScript(renewLua)
)

// Claim implements idemstore.Store.
func (s *Store) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(c.UserID, c.Key)); err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	value, err := encodeClaim(c)
	if err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	key := s.Key(c.UserID, c.Key)
	ttl := ttlMillis(c.Now, later(c.LeaseUntil, c.ExpiresAt))
	res, err := s.claim(ctx, key, c, value, ttl)
	if err != nil {
		return idemstore.ClaimResult{}, storeError(ctx, "claim", err)
	}
	return res, nil
}

// remember keeps the in-progress record value that c's claim wrote at key,
// for a completion with SET … IFEQ, unless the server is known not to have
// it.
func (s *Store) remember(key string, c idemstore.Claim, value []byte) {
	if s.native.Load() != nativeOff {
		s.pending.put(key, c.Owner, value, later(c.LeaseUntil, c.ExpiresAt))
	}
}

// claim is Claim's one SET, and the takeover script when the record found
// is absent by the caller's clock.
func (s *Store) claim(ctx context.Context, key string, c idemstore.Claim, value []byte, ttl int64) (idemstore.ClaimResult, error) {
	set := redis.NewStringCmd(ctx, "set", key, value, "nx", "px", ttl, "get")
	_ = s.client.Process(ctx, set)
	cur, err := set.Result()
	if errors.Is(err, redis.Nil) {
		s.remember(key, c, value)
		return c.Inserted(), nil
	}
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	rec, err := decodeRecord(c.UserID, c.Key, cur)
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	if rec.Live(time.UnixMicro(c.Now.UnixMicro())) { // the record's times are whole µs
		res := c.Found(rec)
		if res.Claimed { // the caller's own claim, found again
			s.remember(key, c, []byte(cur))
		}
		return res, nil
	}
	reply, err := takeoverScript.Run(ctx, s.client, []string{key}, value, c.Now.UnixMicro(), ttl).Result()
	if err != nil {
		return idemstore.ClaimResult{}, err
	}
	switch r := reply.(type) {
	case int64:
		s.remember(key, c, value)
		return c.Inserted(), nil
	case string:
		// Live by the earlier of the two clocks: the answer, whatever the
		// caller's clock says.
		if rec, err = decodeRecord(c.UserID, c.Key, r); err != nil {
			return idemstore.ClaimResult{}, err
		}
		return c.Found(rec), nil
	default:
		return idemstore.ClaimResult{}, fmt.Errorf("malformed takeover reply: %T", reply)
	}
}

// Complete implements idemstore.Store. The write is fenced by the owner token
// and the in-progress status, not by the lease, as in package pgstore. An owner
// whose lease ran out may still complete while nobody has taken the record
// over. Completion.Now is not consulted.
func (s *Store) Complete(ctx context.Context, c idemstore.Completion) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(c.UserID, c.Key)); err != nil {
		return storeError(ctx, "complete", err)
	}
	head, times, headers, err := encodeCompletion(c.Response, c.ExpiresAt)
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	// The record keeps the claim's request hash (64 bytes) and owner
	// token, as in progress; headers holds the origin too.
	if size := minRecordLen + 64 + len(c.Owner) + len(headers) + len(c.Response.Body); size > s.maxRecord {
		return storeError(ctx, "complete", fmt.Errorf("%w: the record would be %d bytes, the most this store writes is %d (Options.MaxRecordBytes)", idemstore.ErrTooLarge, size, s.maxRecord))
	}
	key := s.Key(c.UserID, c.Key)
	ttl := ttlMillis(c.Now, c.ExpiresAt)
	done, err := s.completeNative(ctx, key, c.Owner, head, times, headers, c.Response.Body, ttl)
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	if done {
		return nil
	}
	n, err := completeScript.Run(ctx, s.client, []string{key}, c.Owner, head, times, headers, c.Response.Body, ttl).Int64()
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	if n == 0 {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// Release implements idemstore.Store.
func (s *Store) Release(ctx context.Context, r idemstore.Ref) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(r.UserID, r.Key)); err != nil {
		return storeError(ctx, "release", err)
	}
	key := s.Key(r.UserID, r.Key)
	s.pending.forget(key, r.Owner)
	n, err := releaseScript.Run(ctx, s.client, []string{key}, r.Owner).Int64()
	if err != nil {
		return storeError(ctx, "release", err)
	}
	if n == 0 {
		return idemstore.ErrLeaseLost
	}
	return nil
}

// Renew implements idemstore.Store: the lease of the caller's in-progress
// record moves to r.LeaseUntil. Its expires at moves too, when the lease
// reaches past it. The key then lives at least until the new lease, counted
// from r.Now on the server's clock.
func (s *Store) Renew(ctx context.Context, r idemstore.Renewal) error {
	if err := cmp.Or(ctx.Err(), idemstore.CheckIDs(r.UserID, r.Key)); err != nil {
		return storeError(ctx, "renew", err)
	}
	key := s.Key(r.UserID, r.Key)
	lease := r.LeaseUntil.UnixMicro()
	leaseBytes := binary.BigEndian.AppendUint64(make([]byte, 0, 8), uint64(lease))
	leaseText := strconv.FormatInt(lease, 10)
	ttl := ttlMillis(r.Now, r.LeaseUntil)
	n, err := renewScript.Run(ctx, s.client, []string{key}, r.Owner, leaseBytes, leaseText, ttl).Int64()
	if err != nil {
		// The lease may or may not have moved: complete through the script.
		s.pending.forget(key, r.Owner)
		return storeError(ctx, "renew", err)
	}
	if n == 0 {
		s.pending.forget(key, r.Owner)
		return idemstore.ErrLeaseLost
	}
	s.pending.renewed(key, r.Owner, lease)
	return nil
}

// storeError is the one place where a client error becomes a
// *idemstore.Error. A cancelled or expired context stays visible to
// errors.Is, and the failures an operator can act on get a message that says
// what to do. The failures no retry can cure are marked Permanent: refused
// credentials and ACLs, commands the server does not have, a value under
// the prefix that is not a record, a record too large, an id that is not a
// lower-case UUID.
func storeError(ctx context.Context, op string, err error) error {
	ctxErr := ctx.Err()
	if ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	permanent := false
	switch {
	case errors.Is(err, idemstore.ErrTooLarge), errors.Is(err, idemstore.ErrNotID):
		permanent = true
	case errors.Is(err, redis.Nil):
		err = fmt.Errorf("the server returned no reply to the %s script: %w", op, err)
	case errors.Is(err, errLaterRecord), strings.Contains(err.Error(), "is an idempotency record of a later format"):
		// Transient: a later release wrote it during a rolling deploy; the
		// client's retry reaches that release.
		err = fmt.Errorf("a record was written by a later release of this store: %w", err)
	case errors.Is(err, errNotRecord), strings.Contains(err.Error(), "is not an idempotency record"):
		err = fmt.Errorf("a key under the idempotency prefix holds a value that is not a record (is Options.KeyPrefix shared with other data?): %w", err)
		permanent = true
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		err = fmt.Errorf("a key under the idempotency prefix holds another type of value (is Options.KeyPrefix shared with other data?): %w", err)
		permanent = true
	case redis.HasErrorPrefix(err, "NOPERM"):
		err = fmt.Errorf("the server's ACL refuses the user a command or a key the store needs (SET, GET, EVALSHA, EVAL on keys under Options.KeyPrefix): %w", err)
		permanent = true
	case redis.HasErrorPrefix(err, "WRONGPASS"), redis.HasErrorPrefix(err, "NOAUTH"):
		err = fmt.Errorf("the server refused the credentials: %w", err)
		permanent = true
	case redis.HasErrorPrefix(err, "OOM"):
		err = fmt.Errorf("the server is out of memory (maxmemory reached with the noeviction policy): %w", err)
	case redis.HasErrorPrefix(err, "READONLY"):
		err = fmt.Errorf("the server is a read-only replica; use the primary endpoint: %w", err)
	case strings.Contains(err.Error(), "invalid bulk length"), strings.Contains(err.Error(), "exceeds maximum allowed size"):
		err = fmt.Errorf("%w: the server refused the value as too large (lower Options.MaxRecordBytes to the server's limit): %w", idemstore.ErrTooLarge, err)
		permanent = true
	case op == "claim" && redis.HasErrorPrefix(err, "syntax error"):
		err = fmt.Errorf("the server refused SET with NX and GET (it needs Redis 7.0 or later, or Valkey): %w", err)
		permanent = true
	case redis.HasErrorPrefix(err, "unknown command"):
		err = fmt.Errorf("the server does not know a command the store needs: %w", err)
		permanent = true
	}
	return &idemstore.Error{Op: op, Err: err, Permanent: permanent && ctxErr == nil}
}

// ttlMillis is the time from now to t in whole milliseconds, rounded up,
// at least one.
func ttlMillis(now, t time.Time) int64 {
	d := t.Sub(now)
	ms := d.Milliseconds()
	if time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return max(ms, 1)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
