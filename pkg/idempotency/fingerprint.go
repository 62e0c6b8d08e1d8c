package idempotency

import (
	"cmp"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"hash"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/canonjson"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
	"github.com/ichido/ichido/pkg/idempotency/internal/reccache"
)

// fingerprintVersion starts every hashed input, so that a future change of
// the framing can never produce a hash equal to one made under this one.
const fingerprintVersion = "ichido-request-hash-v1"

var errBadBase64 = errors.New("the request body is marked base64-encoded but is not valid base64")

// Fingerprint returns the request hash (hex SHA-256) that the decorator stores
// with a key. It covers the method, the concrete path, the query parameters
// sorted by name, and the body, each length-prefixed. A JSON body is
// canonicalised first: keys sorted, no insignificant white space, numbers as
// written. That is skipped if it repeats a member name or nests deeper than 64
// levels. Any other body is hashed as its bytes (see docs/library.md). The only
// error is a body marked base64-encoded that does not decode.
func Fingerprint(req Request) (string, error) {
	body := bytesOf(req.Body)
	if req.IsBase64Encoded {
		decoded := make([]byte, base64.StdEncoding.DecodedLen(len(req.Body)))
		n, err := base64.StdEncoding.Decode(decoded, body)
		if err != nil {
			return "", errBadBase64
		}
		body = decoded[:n]
	}
	query := canonicalQuery(req)
	f := fingerprinters.Get().(*fingerprinter)
	defer fingerprinters.Put(f)
	f.h.Reset()
	f.head(req, query)
	f.part(bytesOf("json"))
	if !canonjson.WriteBuffered(f.h, body, &f.canon) {
		f.h.Reset()
		f.head(req, query)
		f.part(bytesOf("raw"))
		f.part(body)
	}
	hex.Encode(f.hex[:], f.h.Sum(f.sum[:0]))
	return string(f.hex[:]), nil
}

// fingerprinter is the scratch state of one Fingerprint call: its hash and
// buffers, reused from call to call so that a fingerprint allocates little
// more than its result.
type fingerprinter struct {
	h     hash.Hash
	len   [8]byte
	sum   [sha256.Size]byte
	hex   [2 * sha256.Size]byte
	canon canonjson.Buffers
}

var fingerprinters = sync.Pool{New: func() any { return &fingerprinter{h: sha256.New()} }}

// head frames the fingerprint's first parts: its version, the method, the
// path and the query.
func (f *fingerprinter) head(req Request, query string) {
	f.part(bytesOf(fingerprintVersion))
	f.part(bytesOf(req.Method))
	f.part(bytesOf(req.Path))
	f.part(bytesOf(query))
}

// part frames b as writePart does.
func (f *fingerprinter) part(b []byte) {
	binary.BigEndian.PutUint64(f.len[:], uint64(len(b)))
	f.h.Write(f.len[:])
	f.h.Write(b)
}

// rawDigest is a SHA-256 over every input of Fingerprint as it arrived,
// before any canonicalisation: two requests with equal raw digests have
// equal fingerprints. A cached record keeps the raw digest of the request
// it answered, so that a repeat of that very request (a retry sends the same
// bytes) takes its fingerprint from the cache without canonicalising the
// body again. The zero value is no digest.
type rawDigest = reccache.Digest

// rawDigestVersion starts every raw digest, as fingerprintVersion does a
// fingerprint.
const rawDigestVersion = "ichido-raw-request-v1"

// rawDigestOf returns the raw digest of req: its method, path, raw query,
// decoded query (read by Fingerprint only when the raw one is empty), the
// base64 flag and the body, each part length-prefixed.
func rawDigestOf(req Request) rawDigest {
	// The parts are framed in one buffer and hashed in one call; a body too
	// large for the buffer streams into the hash after the rest.
	var buf [1024]byte
	b := appendPart(buf[:0], rawDigestVersion)
	b = appendPart(b, req.Method)
	b = appendPart(b, req.Path)
	b = appendPart(b, req.RawQuery)
	if req.RawQuery == "" && len(req.Query) > 0 {
		b = appendPart(b, canonicalValues(req.Query))
	} else {
		b = appendPart(b, "")
	}
	if req.IsBase64Encoded {
		b = appendPart(b, "base64")
	} else {
		b = appendPart(b, "text")
	}
	if len(b)+8+len(req.Body) <= len(buf) {
		return sha256.Sum256(appendPart(b, req.Body))
	}
	h := sha256.New()
	h.Write(b)
	writePart(h, bytesOf(req.Body))
	var d rawDigest
	h.Sum(d[:0])
	return d
}

// appendPart frames s as writePart does.
func appendPart(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// bytesOf returns the bytes of s without copying them; they are only read.
// A 6 MB body is not copied just to be hashed.
func bytesOf(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}

// unsafeString returns b as a string without copying it. Nothing may write
// to b afterwards.
func unsafeString(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// writePart frames b as an 8-byte big-endian length followed by its bytes.
func writePart(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}

// rawMark starts a query name or value that could not be percent-decoded.
// url.QueryEscape never writes it (its "%" is always followed by two hex
// digits), so a marked part never equals an escaped one.
const rawMark = "%!"

// canonicalQuery encodes the query with names sorted; the values of one
// name keep their order, since an API may give that order meaning. With
// req.RawQuery (HTTP API events) it reads the raw parts, marking those that
// do not decode; otherwise (REST API events, whose parameters arrive
// decoded) req.Query. A query whose parts all decode encodes the same
// either way.
func canonicalQuery(req Request) string {
	if req.RawQuery == "" {
		return canonicalValues(req.Query)
	}
	type name struct {
		text string
		raw  bool
	}
	groups := map[name][]string{}
	for p := range apigw.QueryParts(req.RawQuery) {
		n := name{p.Name, p.NameRaw}
		groups[n] = append(groups[n], queryEscape(p.Value, p.ValueRaw))
	}
	names := make([]name, 0, len(groups))
	for n := range groups {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b name) int {
		if c := strings.Compare(a.text, b.text); c != 0 {
			return c
		}
		return cmp.Compare(boolInt(a.raw), boolInt(b.raw))
	})
	var b strings.Builder
	for _, n := range names {
		for _, value := range groups[n] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(queryEscape(n.text, n.raw))
			b.WriteByte('=')
			b.WriteString(value)
		}
	}
	return b.String()
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func queryEscape(s string, raw bool) string {
	if raw {
		return rawMark + url.QueryEscape(s)
	}
	return url.QueryEscape(s)
}

// canonicalValues encodes decoded parameters with names sorted.
func canonicalValues(q url.Values) string {
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	var b strings.Builder
	for _, name := range names {
		for _, value := range q[name] {
			if b.Len() > 0 {
				b.WriteByte('&')
			}
			b.WriteString(url.QueryEscape(name))
			b.WriteByte('=')
			b.WriteString(url.QueryEscape(value))
		}
	}
	return b.String()
}

// fingerprintProblem is the 400 that answers a request whose fingerprint
// cannot be computed.
func fingerprintProblem(err error) problem.Details {
	detail := "The request body is marked base64-encoded but is not valid base64."
	switch {
	case errors.Is(err, errBadBase64):
	case errors.Is(err, errBodyNotJSON):
		detail = "The request body is not the JSON this endpoint expects."
	default:
		detail = "The request could not be fingerprinted as this endpoint expects."
	}
	return problem.New(http.StatusBadRequest, CodeValidation, detail)
}
