// Package redisstore keeps idempotency records in Redis or Valkey (Amazon
// ElastiCache), the second store that ADR 009 names for growth past about
// 10,000 monthly active users. It implements the same idempotency.Store
// contract as package pgstore and passes the same conformance suite, so a
// handler wrapped by idempotency.Wrap does not change when the store does.
//
// Each record is one hash under "<prefix>{<user_id>}:<key>". The braces are
// a hash tag: on a cluster, every key of one user lives in the same slot.
//
// Each Store method is one Lua script, run atomically by the server in one
// round trip (EVALSHA, falling back to EVAL when the server does not know
// the script yet):
//
//   - Claim reads the record and, when it is absent, expired, or in progress
//     with a lease that ran out, replaces it with the caller's in-progress
//     record; otherwise it returns the record as stored.
//   - Complete writes the response, fenced by the owner token and the
//     in-progress status.
//   - Release deletes the record, fenced the same way.
//
// Takeover and expiry are decided against the earlier of the caller's
// clock (Claim.Now, sent as Unix microseconds) and the server's (TIME, read
// only when the caller's clock says the record is absent, so a replay stays
// one HMGET): a caller whose clock runs ahead never takes over a lease that
// is live by the server's clock, and one whose clock runs behind only takes
// over later. An injected clock set in the past still drives every branch.
// Expired records are removed by Redis itself: each write sets the key's
// time to live (PEXPIRE) to the record's, ExpiresAt − Now (while in
// progress, up to the later of ExpiresAt and the lease), counted on the
// server's clock, so that a caller whose clock runs behind does not see its
// record vanish at once; one whose clock runs ahead by s sees it vanish s
// before its ExpiresAt, at the end of a TTL of hours. The decision of the
// claim is always taken with the times above. See
// docs/adr/0060-redis-store.md and docs/adr/0026.
//
// The response body is stored as raw bytes (Redis strings are binary safe),
// so it replays byte for byte, whatever it holds.
package redisstore

import (
	"context"
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/pkg/idempotency"
)

// DefaultKeyPrefix is the prefix of every record's key when
// Options.KeyPrefix is empty.
const DefaultKeyPrefix = "ichido:idem:"

// Options configures a Store. A nil *Options means all defaults.
type Options struct {
	// KeyPrefix starts the key of every record, so that the records can share
	// a server with other data and be found with SCAN. The full key is
	// KeyPrefix + "{" + user id + "}:" + idempotency key. Defaults to
	// "ichido:idem:".
	KeyPrefix string
}

// Store is an idempotency.Store on Redis or Valkey. It is safe for
// concurrent use.
type Store struct {
	client redis.UniversalClient
	prefix string
}

var _ idempotency.Store = (*Store)(nil)

// New returns a Store that keeps its records through client: a
// *redis.Client for a single endpoint (ElastiCache Serverless, the primary
// endpoint of a replication group), or a *redis.ClusterClient. The client's
// settings are left as they are; ClientFromEnv builds one suited to Lambda.
func New(client redis.UniversalClient, opts *Options) *Store {
	prefix := DefaultKeyPrefix
	if opts != nil && opts.KeyPrefix != "" {
		prefix = opts.KeyPrefix
	}
	return &Store{client: client, prefix: prefix}
}

// Key returns the Redis key of the record of user's idempotency key.
func (s *Store) Key(userID, key string) string {
	return s.prefix + "{" + userID + "}:" + key
}

var (
	//go:embed claim.lua
	claimLua    string
	claimScript = redis.NewScript(claimLua)

	//go:embed complete.lua
	completeLua    string
	completeScript = redis.NewScript(completeLua)

	//go:embed release.lua
	releaseLua    string
	releaseScript = redis.NewScript(releaseLua)
)

// claimedReply is what the claim script returns when the caller now holds a
// record it wrote, reclaimedReply when it found the caller's own live claim
// of the same request; otherwise it returns the stored record's fields.
const (
	claimedReply   = "claimed"
	reclaimedReply = "reclaimed"
)

// Claim implements idempotency.Store.
func (s *Store) Claim(ctx context.Context, c idempotency.Claim) (idempotency.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idempotency.ClaimResult{}, storeError(ctx, "claim", err)
	}
	reply, err := claimScript.Run(ctx, s.client, []string{s.Key(c.UserID, c.Key)},
		c.Owner, c.RequestHash, micros(c.Now), micros(c.LeaseUntil), micros(c.ExpiresAt),
		ttlMillis(c.Now, later(c.LeaseUntil, c.ExpiresAt)),
	).Slice()
	if err != nil {
		return idempotency.ClaimResult{}, storeError(ctx, "claim", err)
	}
	if len(reply) == 1 && reply[0] == reclaimedReply {
		// The owner repeating its own live claim of the same request (a lost
		// reply) holds the record again; the script left it as it was.
		return idempotency.ClaimResult{Claimed: true, Record: idempotency.Record{
			UserID: c.UserID, Key: c.Key, Owner: c.Owner, RequestHash: c.RequestHash, Status: idempotency.StatusInProgress,
		}}, nil
	}
	if len(reply) == 1 && reply[0] == claimedReply {
		return idempotency.ClaimResult{Claimed: true, Record: idempotency.Record{
			UserID:      c.UserID,
			Key:         c.Key,
			Owner:       c.Owner,
			RequestHash: c.RequestHash,
			Status:      idempotency.StatusInProgress,
			CreatedAt:   fromMicros(micros(c.Now)),
			LeaseUntil:  fromMicros(micros(c.LeaseUntil)),
			ExpiresAt:   fromMicros(micros(c.ExpiresAt)),
		}}, nil
	}
	rec, err := decodeRecord(c.UserID, c.Key, reply)
	if err != nil {
		return idempotency.ClaimResult{}, storeError(ctx, "claim", err)
	}
	return idempotency.ClaimResult{Record: rec}, nil
}

// Complete implements idempotency.Store. The write is fenced by the owner
// token and the in-progress status, not by the lease: an owner whose lease
// ran out may still complete while nobody has taken the record over, as in
// package pgstore. Completion.Now is not consulted.
func (s *Store) Complete(ctx context.Context, c idempotency.Completion) error {
	if err := ctx.Err(); err != nil {
		return storeError(ctx, "complete", err)
	}
	headers, headersEncoding, err := encodeHeaders(c.Response.Headers)
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	n, err := completeScript.Run(ctx, s.client, []string{s.Key(c.UserID, c.Key)},
		c.Owner, strconv.Itoa(c.Response.StatusCode), headers, headersEncoding,
		c.Response.Body, flag(c.Response.IsBase64Encoded), micros(c.ExpiresAt), ttlMillis(c.Now, c.ExpiresAt),
	).Int64()
	if err != nil {
		return storeError(ctx, "complete", err)
	}
	if n == 0 {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// Release implements idempotency.Store.
func (s *Store) Release(ctx context.Context, r idempotency.Ref) error {
	if err := ctx.Err(); err != nil {
		return storeError(ctx, "release", err)
	}
	n, err := releaseScript.Run(ctx, s.client, []string{s.Key(r.UserID, r.Key)}, r.Owner).Int64()
	if err != nil {
		return storeError(ctx, "release", err)
	}
	if n == 0 {
		return idempotency.ErrLeaseLost
	}
	return nil
}

// storeError is the one place where a client error becomes a
// *idempotency.StoreError. A cancelled or expired context stays visible to
// errors.Is, and the failures an operator can act on get a message that says
// what to do.
func storeError(ctx context.Context, op string, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
		err = fmt.Errorf("%w: %w", ctxErr, err)
	}
	switch {
	case errors.Is(err, redis.Nil):
		err = fmt.Errorf("the server returned no reply to the %s script: %w", op, err)
	case redis.HasErrorPrefix(err, "WRONGTYPE"):
		err = fmt.Errorf("a key under the idempotency prefix holds another type of value (is Options.KeyPrefix shared with other data?): %w", err)
	case redis.HasErrorPrefix(err, "OOM"):
		err = fmt.Errorf("the server is out of memory (maxmemory reached with the noeviction policy): %w", err)
	case redis.HasErrorPrefix(err, "READONLY"):
		err = fmt.Errorf("the server is a read-only replica; use the primary endpoint: %w", err)
	}
	return &idempotency.StoreError{Op: op, Err: err}
}

// Record fields, as the scripts write them.
const (
	fieldStatus          = "status"
	fieldOwner           = "owner"
	fieldRequestHash     = "request_hash"
	fieldCreatedAt       = "created_at"
	fieldLeaseUntil      = "lease_until"
	fieldExpiresAt       = "expires_at"
	fieldStatusCode      = "status_code"
	fieldHeaders         = "headers"
	fieldHeadersEncoding = "headers_encoding"
	fieldBody            = "body"
	fieldBodyBase64      = "body_base64"
)

// claimFields are the fields the claim script returns, in its order.
var claimFields = []string{fieldStatus, fieldRequestHash, fieldOwner, fieldLeaseUntil, fieldExpiresAt,
	fieldCreatedAt, fieldStatusCode, fieldHeaders, fieldHeadersEncoding, fieldBody, fieldBodyBase64}

// decodeRecord reads the record's fields as the claim script returns them.
func decodeRecord(userID, key string, reply []any) (idempotency.Record, error) {
	if len(reply) != len(claimFields) {
		return idempotency.Record{}, fmt.Errorf("malformed record reply: %d elements", len(reply))
	}
	f := make(map[string]string, len(reply))
	for i, v := range reply {
		s, ok := v.(string)
		if !ok {
			return idempotency.Record{}, fmt.Errorf("malformed record reply: element %d is %T", i, v)
		}
		f[claimFields[i]] = s
	}
	rec := idempotency.Record{
		UserID:      userID,
		Key:         key,
		Owner:       f[fieldOwner],
		RequestHash: f[fieldRequestHash],
		Status:      idempotency.Status(f[fieldStatus]),
	}
	var err error
	if f[fieldCreatedAt] != "" {
		if rec.CreatedAt, err = parseMicros(f, fieldCreatedAt); err != nil {
			return idempotency.Record{}, err
		}
	}
	if rec.ExpiresAt, err = parseMicros(f, fieldExpiresAt); err != nil {
		return idempotency.Record{}, err
	}
	switch rec.Status {
	case idempotency.StatusInProgress:
		if rec.LeaseUntil, err = parseMicros(f, fieldLeaseUntil); err != nil {
			return idempotency.Record{}, err
		}
	case idempotency.StatusCompleted:
		resp := &idempotency.StoredResponse{Body: f[fieldBody], IsBase64Encoded: f[fieldBodyBase64] == "1"}
		if resp.StatusCode, err = strconv.Atoi(f[fieldStatusCode]); err != nil {
			return idempotency.Record{}, fmt.Errorf("malformed record field %s: %w", fieldStatusCode, err)
		}
		if resp.Headers, err = decodeHeaders(f[fieldHeaders], f[fieldHeadersEncoding]); err != nil {
			return idempotency.Record{}, err
		}
		rec.Response = resp
	default:
		return idempotency.Record{}, fmt.Errorf("malformed record: unknown status %q", rec.Status)
	}
	return rec, nil
}

// headersBase64 marks a header set kept as base64 of its names and values
// because JSON text cannot carry their bytes (invalid UTF-8).
const headersBase64 = "base64"

// encodeHeaders returns the JSON text of h ("" for none) and its encoding
// marker: "" when the names and values are kept as they are, "base64" when
// they are base64 of their bytes.
func encodeHeaders(h map[string]string) (string, string, error) {
	if len(h) == 0 {
		return "", "", nil
	}
	encoding := ""
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			encoding = headersBase64
			break
		}
	}
	if encoding == headersBase64 {
		b64 := make(map[string]string, len(h))
		for k, v := range h {
			b64[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		h = b64
	}
	b, err := json.Marshal(h)
	if err != nil {
		return "", "", fmt.Errorf("encoding the response headers: %w", err)
	}
	return string(b), encoding, nil
}

func decodeHeaders(text, encoding string) (map[string]string, error) {
	if text == "" {
		return nil, nil
	}
	var h map[string]string
	if err := json.Unmarshal([]byte(text), &h); err != nil {
		return nil, fmt.Errorf("malformed record field %s: %w", fieldHeaders, err)
	}
	switch encoding {
	case "":
		return h, nil
	case headersBase64:
		out := make(map[string]string, len(h))
		for k, v := range h {
			kb, kerr := base64.StdEncoding.DecodeString(k)
			vb, verr := base64.StdEncoding.DecodeString(v)
			if err := errors.Join(kerr, verr); err != nil {
				return nil, fmt.Errorf("malformed record field %s: %w", fieldHeaders, err)
			}
			out[string(kb)] = string(vb)
		}
		return out, nil
	default:
		return nil, fmt.Errorf("malformed record: unknown %s %q", fieldHeadersEncoding, encoding)
	}
}

// micros returns t as decimal Unix microseconds, the precision the contract
// keeps (PostgreSQL's timestamptz). Lua compares them as doubles, which hold
// every integer up to 2^53 exactly: Unix microseconds until the year 2255.
func micros(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

func fromMicros(s string) time.Time {
	n, _ := strconv.ParseInt(s, 10, 64)
	return time.UnixMicro(n).UTC()
}

func parseMicros(f map[string]string, name string) (time.Time, error) {
	n, err := strconv.ParseInt(f[name], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("malformed record field %s: %w", name, err)
	}
	return time.UnixMicro(n).UTC(), nil
}

// ttlMillis is the time from now to t in whole milliseconds, rounded up,
// at least one.
func ttlMillis(now, t time.Time) string {
	d := t.Sub(now)
	ms := d.Milliseconds()
	if time.Duration(ms)*time.Millisecond < d {
		ms++
	}
	return strconv.FormatInt(max(ms, 1), 10)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
