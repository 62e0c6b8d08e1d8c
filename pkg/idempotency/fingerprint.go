package idempotency

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash"
	"io"
	"net/url"
	"slices"
	"unicode/utf8"

	"github.com/ichido/ichido/pkg/apigw"
)

// fingerprintVersion starts every hashed input, so that a future change of
// the framing can never produce a hash equal to one made under this one.
const fingerprintVersion = "ichido-request-hash-v1"

var errBadBase64 = errors.New("the request body is marked base64-encoded but is not valid base64")

// Fingerprint returns the request hash (hex SHA-256) that the decorator
// stores with a key: over the method, the concrete path, the query
// parameters sorted by name (the values of one name in the order sent) and
// the body. A JSON body is canonicalised first (object keys sorted, no
// insignificant white space, numbers exactly as written); any other body is
// hashed as its bytes, base64-decoded first when req.IsBase64Encoded.
//
// Every part is length-prefixed, so no two different requests frame to the
// same bytes. The only error is a body marked base64-encoded that does not
// decode.
func Fingerprint(req apigw.Request) (string, error) {
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		decoded, err := base64.StdEncoding.DecodeString(req.Body)
		if err != nil {
			return "", errBadBase64
		}
		body = decoded
	}
	h := sha256.New()
	writePart(h, fingerprintVersion)
	writePart(h, req.Method)
	writePart(h, req.Path)
	writePart(h, canonicalQuery(req.Query))
	if canonical, ok := canonicalJSON(body); ok {
		writePart(h, "json")
		writePart(h, string(canonical))
	} else {
		writePart(h, "raw")
		writePart(h, string(body))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writePart frames s as an 8-byte big-endian length followed by its bytes.
func writePart(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	io.WriteString(h, s)
}

// canonicalQuery encodes q with names sorted; the values of one name keep
// their order, since an API may give that order meaning.
func canonicalQuery(q url.Values) string {
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	slices.Sort(names)
	var b bytes.Buffer
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

// canonicalJSON returns body as canonical JSON, or false when body is not
// one valid UTF-8 JSON value. Numbers keep their text (json.Number), so 1.0
// and 1 stay different; strings are re-escaped uniformly, so "\u0041" and
// "A" are the same.
func canonicalJSON(body []byte) ([]byte, bool) {
	if !utf8.Valid(body) || !json.Valid(body) {
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil { // e.g. nesting deeper than encoding/json allows
		return nil, false
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), true
}
