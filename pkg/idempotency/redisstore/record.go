package redisstore

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// The record format, versions 1 and 2: one string value, every integer
// big-endian. The package comment describes it; record.lua reads the same
// fields on the server.
const (
	recordVersion = 1
	// recordVersionOrigin is the version of a completed record whose
	// response has an origin: version 1 with the origin between the
	// headers and the body. A reader that knows version 1 only refuses it
	// rather than take the origin for the body's first bytes.
	recordVersionOrigin = 2

	statusInProgress = 'p'
	statusCompleted  = 'c'

	flagBodyBase64 = 1 << 0
	// flagNotKept marks the not-kept marker of a completed run
	// (idemstore.Response.NotKept).
	flagNotKept = 1 << 1

	offVersion = 0
	offStatus  = 1
	offFlags   = 2
	offCreated = 3
	offLease   = 11
	offExpires = 19
	offCode    = 27
	// fixedLen is the length of the fixed fields above; the request hash's
	// length comes next.
	fixedLen = 31
	// minRecordLen is the shortest record: the fixed fields, an empty hash,
	// an empty owner and no headers.
	minRecordLen = fixedLen + 2 + 2 + 2
)

// errNotRecord marks a value under the prefix that is not a record of a
// format this package knows.
var errNotRecord = errors.New("not an idempotency record")

// errLaterRecord marks a record of a later format than this release knows: a
// version above recordVersionOrigin, below the printable bytes. A later release
// wrote it during a rolling deploy. It is a store failure that a retry,
// reaching the later release, gets past.
var errLaterRecord = errors.New("an idempotency record of a later format")

// encodeClaim returns the in-progress record of c.
func encodeClaim(c idemstore.Claim) ([]byte, error) {
	return encodeRecord(idemstore.Record{
		Owner: c.Owner, Fingerprint: c.Fingerprint, Status: idemstore.StatusInProgress,
		CreatedAt: c.Now, LeaseUntil: c.LeaseUntil, ExpiresAt: c.ExpiresAt,
	})
}

// encodeRecord returns rec in the record format. The complete script
// builds a completed record from the in-progress one and the pieces of
// encodeCompletion; the result is the same as this function's.
func encodeRecord(rec idemstore.Record) ([]byte, error) {
	var status, flags byte
	var code int
	var headers map[string]string
	var body string
	var origin *idemstore.Origin
	lease := rec.LeaseUntil.UnixMicro()
	switch rec.Status {
	case idemstore.StatusInProgress:
		status = statusInProgress
	case idemstore.StatusCompleted:
		if rec.Response == nil {
			return nil, errors.New("a completed record needs its response")
		}
		status, lease = statusCompleted, 0
		code, headers, body, origin = rec.Response.StatusCode, rec.Response.Headers, rec.Response.Body, rec.Response.Origin
		if rec.Response.IsBase64Encoded {
			flags |= flagBodyBase64
		}
		if rec.Response.NotKept {
			flags |= flagNotKept
		}
	default:
		return nil, fmt.Errorf("unknown record status %q", rec.Status)
	}
	if err := checkLen16("request hash", rec.Fingerprint); err != nil {
		return nil, err
	}
	if err := checkLen16("owner token", rec.Owner); err != nil {
		return nil, err
	}
	if err := checkCode(code); err != nil {
		return nil, err
	}
	if err := checkOrigin(origin); err != nil {
		return nil, err
	}
	b := make([]byte, fixedLen, minRecordLen+len(rec.Fingerprint)+len(rec.Owner)+headersLen(headers)+originLen(origin)+len(body))
	b[offVersion], b[offStatus], b[offFlags] = versionOf(origin), status, flags
	binary.BigEndian.PutUint64(b[offCreated:], uint64(rec.CreatedAt.UnixMicro()))
	binary.BigEndian.PutUint64(b[offLease:], uint64(lease))
	binary.BigEndian.PutUint64(b[offExpires:], uint64(rec.ExpiresAt.UnixMicro()))
	binary.BigEndian.PutUint32(b[offCode:], uint32(int32(code)))
	b = appendString16(b, rec.Fingerprint)
	b = appendString16(b, rec.Owner)
	b, err := appendHeaders(b, headers)
	if err != nil {
		return nil, err
	}
	b = appendOrigin(b, origin)
	return append(b, body...), nil
}

// encodeCompletion returns what the complete script puts in place of an
// in-progress record's fields: the head (the version, the completed
// status and the flags: offCreated bytes); the lease (zero), expiry and
// status code (16 bytes, offLease to fixedLen); and the headers, then the
// origin when there is one. The body follows them as it is.
func encodeCompletion(resp idemstore.Response, expiresAt time.Time) (head, times, headers []byte, err error) {
	if err := checkCode(resp.StatusCode); err != nil {
		return nil, nil, nil, err
	}
	if err := checkOrigin(resp.Origin); err != nil {
		return nil, nil, nil, err
	}
	var flags byte
	if resp.IsBase64Encoded {
		flags |= flagBodyBase64
	}
	if resp.NotKept {
		flags |= flagNotKept
	}
	head = []byte{versionOf(resp.Origin), statusCompleted, flags}
	times = make([]byte, fixedLen-offLease)
	binary.BigEndian.PutUint64(times[offExpires-offLease:], uint64(expiresAt.UnixMicro()))
	binary.BigEndian.PutUint32(times[offCode-offLease:], uint32(int32(resp.StatusCode)))
	if headers, err = appendHeaders(make([]byte, 0, headersLen(resp.Headers)+originLen(resp.Origin)), resp.Headers); err != nil {
		return nil, nil, nil, err
	}
	return head, times, appendOrigin(headers, resp.Origin), nil
}

// versionOf is the version of a record whose response has origin o: a
// record without one stays in version 1, byte for byte.
func versionOf(o *idemstore.Origin) byte {
	if o != nil {
		return recordVersionOrigin
	}
	return recordVersion
}

func checkOrigin(o *idemstore.Origin) error {
	if o == nil {
		return nil
	}
	return cmp.Or(checkLen16("origin's trace id", o.TraceID), checkLen16("origin's span id", o.SpanID))
}

func originLen(o *idemstore.Origin) int {
	if o == nil {
		return 0
	}
	return 2 + len(o.TraceID) + 2 + len(o.SpanID) + 8
}

// appendOrigin appends o, when there is one: its trace id and span id,
// each after its length (2 bytes), then its time (Unix µs, 8 bytes).
func appendOrigin(b []byte, o *idemstore.Origin) []byte {
	if o == nil {
		return b
	}
	b = appendString16(b, o.TraceID)
	b = appendString16(b, o.SpanID)
	return binary.BigEndian.AppendUint64(b, uint64(o.At.UnixMicro()))
}

func checkLen16(what, s string) error {
	if len(s) > math.MaxUint16 {
		return fmt.Errorf("the %s is %d bytes long, more than the record format's %d", what, len(s), math.MaxUint16)
	}
	return nil
}

func checkCode(code int) error {
	if code < math.MinInt32 || code > math.MaxInt32 {
		return fmt.Errorf("status code %d does not fit the record format", code)
	}
	return nil
}

func headersLen(h map[string]string) int {
	n := 2
	for k, v := range h {
		n += 8 + len(k) + len(v)
	}
	return n
}

// appendHeaders appends the number of headers (2 bytes), then each name
// and value with its length (4 bytes) before it.
func appendHeaders(b []byte, h map[string]string) ([]byte, error) {
	if len(h) > math.MaxUint16 {
		return nil, fmt.Errorf("%d response headers, more than the record format's %d", len(h), math.MaxUint16)
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(h)))
	for k, v := range h {
		if uint64(len(k)) > math.MaxUint32 || uint64(len(v)) > math.MaxUint32 {
			return nil, fmt.Errorf("response header %.40q is too long for the record format", k)
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(k)))
		b = append(b, k...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(v)))
		b = append(b, v...)
	}
	return b, nil
}

func appendString16(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

// decodeRecord reads a record value. The strings of the record (hash,
// owner, headers, body) share v's memory: a replay costs the reply, the
// header map and nothing else.
func decodeRecord(userID, key, v string) (idemstore.Record, error) {
	if len(v) > 0 && v[offVersion] > recordVersionOrigin && v[offVersion] < ' ' {
		return idemstore.Record{}, fmt.Errorf("version %d: %w", v[offVersion], errLaterRecord)
	}
	if len(v) < minRecordLen || (v[offVersion] != recordVersion && v[offVersion] != recordVersionOrigin) {
		return idemstore.Record{}, notRecord(v, "unknown format")
	}
	rec := idemstore.Record{
		UserID:    userID,
		Key:       key,
		CreatedAt: time.UnixMicro(be64(v, offCreated)).UTC(),
		ExpiresAt: time.UnixMicro(be64(v, offExpires)).UTC(),
	}
	pos := fixedLen
	var ok bool
	if rec.Fingerprint, pos, ok = string16(v, pos); !ok {
		return idemstore.Record{}, notRecord(v, "truncated request hash")
	}
	if rec.Owner, pos, ok = string16(v, pos); !ok {
		return idemstore.Record{}, notRecord(v, "truncated owner")
	}
	if pos+2 > len(v) {
		return idemstore.Record{}, notRecord(v, "truncated headers")
	}
	switch v[offStatus] {
	case statusInProgress:
		if v[offVersion] != recordVersion {
			return idemstore.Record{}, notRecord(v, "an origin in progress")
		}
		rec.Status = idemstore.StatusInProgress
		rec.LeaseUntil = time.UnixMicro(be64(v, offLease)).UTC()
		return rec, nil
	case statusCompleted:
		rec.Status = idemstore.StatusCompleted
	default:
		return idemstore.Record{}, notRecord(v, "unknown status")
	}
	resp := &idemstore.Response{
		StatusCode:      int(int32(uint32(v[offCode])<<24 | uint32(v[offCode+1])<<16 | uint32(v[offCode+2])<<8 | uint32(v[offCode+3]))),
		IsBase64Encoded: v[offFlags]&flagBodyBase64 != 0,
		NotKept:         v[offFlags]&flagNotKept != 0,
	}
	n := int(v[pos])<<8 | int(v[pos+1])
	pos += 2
	if n > 0 {
		resp.Headers = make(map[string]string, n)
		for range n {
			var name, value string
			if name, pos, ok = string32(v, pos); !ok {
				return idemstore.Record{}, notRecord(v, "truncated header name")
			}
			if value, pos, ok = string32(v, pos); !ok {
				return idemstore.Record{}, notRecord(v, "truncated header value")
			}
			resp.Headers[name] = value
		}
	}
	if v[offVersion] == recordVersionOrigin {
		o := &idemstore.Origin{}
		if o.TraceID, pos, ok = string16(v, pos); !ok {
			return idemstore.Record{}, notRecord(v, "truncated origin trace id")
		}
		if o.SpanID, pos, ok = string16(v, pos); !ok {
			return idemstore.Record{}, notRecord(v, "truncated origin span id")
		}
		if pos+8 > len(v) {
			return idemstore.Record{}, notRecord(v, "truncated origin time")
		}
		o.At = time.UnixMicro(be64(v, pos)).UTC()
		pos += 8
		resp.Origin = o
	}
	resp.Body = v[pos:]
	rec.Response = resp
	return rec, nil
}

func notRecord(v, why string) error {
	return fmt.Errorf("%w (%s, %d bytes)", errNotRecord, why, len(v))
}

func be64(v string, i int) int64 {
	return int64(uint64(v[i])<<56 | uint64(v[i+1])<<48 | uint64(v[i+2])<<40 | uint64(v[i+3])<<32 |
		uint64(v[i+4])<<24 | uint64(v[i+5])<<16 | uint64(v[i+6])<<8 | uint64(v[i+7]))
}

// string16 reads a string after its 2-byte length at pos.
func string16(v string, pos int) (string, int, bool) {
	if pos+2 > len(v) {
		return "", pos, false
	}
	n := int(v[pos])<<8 | int(v[pos+1])
	pos += 2
	if n > len(v)-pos {
		return "", pos, false
	}
	return v[pos : pos+n], pos + n, true
}

// string32 reads a string after its 4-byte length at pos.
func string32(v string, pos int) (string, int, bool) {
	if pos+4 > len(v) {
		return "", pos, false
	}
	n := uint64(v[pos])<<24 | uint64(v[pos+1])<<16 | uint64(v[pos+2])<<8 | uint64(v[pos+3])
	pos += 4
	if n > uint64(len(v)-pos) {
		return "", pos, false
	}
	return v[pos : pos+int(n)], pos + int(n), true
}
