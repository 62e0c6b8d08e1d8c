package redisstore

import (
	_ "embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/ichido/ichido/pkg/idempotency"
)

// The hash layout: before the string layout, a record was one hash with a
// field per record field (status, owner, request_hash, created_at,
// lease_until, expires_at, status_code, headers as JSON, headers_encoding,
// body, body_base64). A key that still holds one answers the string
// layout's commands with WRONGTYPE, and the store then runs these scripts
// on it. No record of the hash layout is written any more: a claim that
// takes one over, or finds its key gone, writes the string layout. Keys of
// the hash layout are gone one TTL after the upgrade; this file can go one
// release later.

var (
	//go:embed legacy_hash_claim.lua
	legacyHashClaimLua    string
	legacyHashClaimScript = newScript(legacyHashClaimLua)

	//go:embed legacy_hash_complete.lua
	legacyHashCompleteLua    string
	legacyHashCompleteScript = newScript(legacyHashCompleteLua)

	//go:embed legacy_hash_release.lua
	legacyHashReleaseLua    string
	legacyHashReleaseScript = newScript(legacyHashReleaseLua)

	//go:embed legacy_hash_renew.lua
	legacyHashRenewLua    string
	legacyHashRenewScript = newScript(legacyHashRenewLua)
)

// What the hash layout's claim script returns instead of the record's
// fields.
const (
	hashClaimedReply   = "claimed"
	hashReclaimedReply = "reclaimed"
)

// Hash layout fields.
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

// hashClaimFields are the fields the hash layout's claim script returns, in
// its order.
var hashClaimFields = []string{fieldStatus, fieldRequestHash, fieldOwner, fieldLeaseUntil, fieldExpiresAt,
	fieldCreatedAt, fieldStatusCode, fieldHeaders, fieldHeadersEncoding, fieldBody, fieldBodyBase64}

// hashClaimResult reads the hash layout claim script's reply.
func hashClaimResult(c idempotency.Claim, reply []any) (idempotency.ClaimResult, error) {
	if len(reply) == 1 && reply[0] == hashReclaimedReply {
		return idempotency.ClaimResult{Claimed: true, Record: idempotency.Record{
			UserID: c.UserID, Key: c.Key, Owner: c.Owner, RequestHash: c.RequestHash, Status: idempotency.StatusInProgress,
		}}, nil
	}
	if len(reply) == 1 && reply[0] == hashClaimedReply {
		return claimed(c), nil
	}
	rec, err := decodeHashRecord(c.UserID, c.Key, reply)
	if err != nil {
		return idempotency.ClaimResult{}, err
	}
	return idempotency.ClaimResult{Record: rec}, nil
}

// decodeHashRecord reads a record's fields as the hash layout's claim
// script returns them.
func decodeHashRecord(userID, key string, reply []any) (idempotency.Record, error) {
	if len(reply) != len(hashClaimFields) {
		return idempotency.Record{}, fmt.Errorf("malformed record reply: %d elements", len(reply))
	}
	f := make(map[string]string, len(reply))
	for i, v := range reply {
		s, ok := v.(string)
		if !ok {
			return idempotency.Record{}, fmt.Errorf("malformed record reply: element %d is %T", i, v)
		}
		f[hashClaimFields[i]] = s
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
		if rec.CreatedAt, err = parseHashMicros(f, fieldCreatedAt); err != nil {
			return idempotency.Record{}, err
		}
	}
	if rec.ExpiresAt, err = parseHashMicros(f, fieldExpiresAt); err != nil {
		return idempotency.Record{}, err
	}
	switch rec.Status {
	case idempotency.StatusInProgress:
		if rec.LeaseUntil, err = parseHashMicros(f, fieldLeaseUntil); err != nil {
			return idempotency.Record{}, err
		}
	case idempotency.StatusCompleted:
		resp := &idempotency.StoredResponse{Body: f[fieldBody], IsBase64Encoded: f[fieldBodyBase64] == "1"}
		if resp.StatusCode, err = strconv.Atoi(f[fieldStatusCode]); err != nil {
			return idempotency.Record{}, fmt.Errorf("malformed record field %s: %w", fieldStatusCode, err)
		}
		if resp.Headers, err = decodeHashHeaders(f[fieldHeaders], f[fieldHeadersEncoding]); err != nil {
			return idempotency.Record{}, err
		}
		rec.Response = resp
	default:
		return idempotency.Record{}, fmt.Errorf("malformed record: unknown status %q", rec.Status)
	}
	return rec, nil
}

// hashHeadersBase64 marks a header set kept as base64 of its names and
// values because JSON text cannot carry their bytes (invalid UTF-8).
const hashHeadersBase64 = "base64"

// encodeHashHeaders returns the JSON text of h ("" for none) and its
// encoding marker: "" when the names and values are kept as they are,
// "base64" when they are base64 of their bytes.
func encodeHashHeaders(h map[string]string) (string, string, error) {
	if len(h) == 0 {
		return "", "", nil
	}
	encoding := ""
	for k, v := range h {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			encoding = hashHeadersBase64
			break
		}
	}
	if encoding == hashHeadersBase64 {
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

func decodeHashHeaders(text, encoding string) (map[string]string, error) {
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
	case hashHeadersBase64:
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

func parseHashMicros(f map[string]string, name string) (time.Time, error) {
	n, err := strconv.ParseInt(f[name], 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("malformed record field %s: %w", name, err)
	}
	return time.UnixMicro(n).UTC(), nil
}
