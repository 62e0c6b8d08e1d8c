package pgstore

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// encodingBase64 marks a body or header set kept as base64 because it cannot
// be JSONB text as it is.
const encodingBase64 = "base64"

// envelope is what response_body holds: the stored response as a JSON object
// whose body is a JSON string. The body is never a parsed JSON value. So
// JSONB's normalisation (key order, white space, duplicate keys, number forms)
// cannot touch it, and the replay is byte for byte.
//
// JSONB text cannot hold every Go string: \u0000 is refused and invalid UTF-8
// would be replaced by U+FFFD on the way in. A body (or a header set) holding
// either is kept as base64 of its bytes, marked by BodyEncoding (or
// HeadersEncoding) "base64"; without a marker the value is the text itself.
//
// The response's origin, when it has one, is the member origin: its trace
// and span ids, and at, its time in Unix microseconds. A reader ignores a
// member it does not know (encoding/json decides for parseEnvelope), so a
// release that does not know origin replays such a record without it.
type envelope struct {
	Status          int               `json:"status"`
	Headers         map[string]string `json:"headers,omitempty"`
	HeadersEncoding string            `json:"headersEncoding,omitempty"`
	Body            string            `json:"body"`
	BodyEncoding    string            `json:"bodyEncoding,omitempty"`
	IsBase64Encoded bool              `json:"isBase64Encoded,omitempty"`
	NotKept         bool              `json:"notKept,omitempty"`
	Origin          *envelopeOrigin   `json:"origin,omitempty"`
}

// envelopeOrigin is the envelope's origin member.
type envelopeOrigin struct {
	Trace string `json:"trace"`
	Span  string `json:"span"`
	At    int64  `json:"at"`
}

// jsonbSafe reports whether s survives as JSONB text unchanged.
func jsonbSafe(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// encodeEnvelope returns the JSON text of r's envelope. It is written by
// hand (PostgreSQL parses it into JSONB, which orders the members itself):
// encoding/json's map and struct walk cost more than the rest of a first
// request's Go side.
func encodeEnvelope(r idemstore.Response) (string, error) {
	body, bodyEncoding := r.Body, ""
	if !jsonbSafe(body) {
		body, bodyEncoding = base64.StdEncoding.EncodeToString([]byte(body)), encodingBase64
	}
	headers, headersEncoding := r.Headers, ""
	size := len(body) + 64
	if r.Origin != nil {
		size += len(r.Origin.TraceID) + len(r.Origin.SpanID) + 64
	}
	for k, v := range headers {
		size += len(k) + len(v) + 6
		if !jsonbSafe(k) || !jsonbSafe(v) {
			headersEncoding = encodingBase64
		}
	}
	if headersEncoding != "" {
		headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			headers[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
		}
		size += size / 3
	}
	b := make([]byte, 0, size)
	b = append(b, `{"status":`...)
	b = strconv.AppendInt(b, int64(r.StatusCode), 10)
	if len(headers) > 0 {
		b = append(b, `,"headers":{`...)
		first := true
		for k, v := range headers {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, v)
		}
		b = append(b, '}')
		if headersEncoding != "" {
			b = append(b, `,"headersEncoding":"`+encodingBase64+`"`...)
		}
	}
	b = append(b, `,"body":`...)
	b = appendJSONString(b, body)
	if bodyEncoding != "" {
		b = append(b, `,"bodyEncoding":"`+encodingBase64+`"`...)
	}
	if r.IsBase64Encoded {
		b = append(b, `,"isBase64Encoded":true`...)
	}
	if r.NotKept {
		b = append(b, `,"notKept":true`...)
	}
	if o := r.Origin; o != nil {
		if !jsonbSafe(o.TraceID) || !jsonbSafe(o.SpanID) {
			return "", fmt.Errorf("the response's origin ids %.40q and %.40q are not text", o.TraceID, o.SpanID)
		}
		b = append(b, `,"origin":{"trace":`...)
		b = appendJSONString(b, o.TraceID)
		b = append(b, `,"span":`...)
		b = appendJSONString(b, o.SpanID)
		b = append(b, `,"at":`...)
		b = strconv.AppendInt(b, o.At.UnixMicro(), 10)
		b = append(b, '}')
	}
	b = append(b, '}')
	return string(b), nil
}

// appendJSONString appends s, valid UTF-8 without NUL (jsonbSafe, or
// base64), as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		b = append(b, s[start:i]...)
		switch c {
		case '"', '\\':
			b = append(b, '\\', c)
		case '\n':
			b = append(b, '\\', 'n')
		case '\r':
			b = append(b, '\\', 'r')
		case '\t':
			b = append(b, '\\', 't')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// decodeEnvelope reads an envelope written by encodeEnvelope, as
// PostgreSQL gives it back (the JSONB's text).
func decodeEnvelope(text string) (*idemstore.Response, error) {
	env, ok := parseEnvelope(text)
	if !ok {
		// Not the shape parseEnvelope reads (it reads what PostgreSQL
		// writes for an envelope): the general decoder decides.
		env = envelope{}
		if err := json.Unmarshal([]byte(text), &env); err != nil {
			return nil, fmt.Errorf("decoding the response envelope: %w", err)
		}
	}
	r := &idemstore.Response{StatusCode: env.Status, Body: env.Body, IsBase64Encoded: env.IsBase64Encoded, NotKept: env.NotKept}
	if o := env.Origin; o != nil {
		r.Origin = &idemstore.Origin{TraceID: o.Trace, SpanID: o.Span, At: time.UnixMicro(o.At).UTC()}
	}
	switch env.BodyEncoding {
	case "":
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(env.Body)
		if err != nil {
			return nil, fmt.Errorf("decoding the response envelope's body: %w", err)
		}
		r.Body = string(b)
	default:
		return nil, fmt.Errorf("decoding the response envelope: unknown bodyEncoding %q", env.BodyEncoding)
	}
	switch env.HeadersEncoding {
	case "":
		r.Headers = env.Headers
	case encodingBase64:
		r.Headers = make(map[string]string, len(env.Headers))
		for k, v := range env.Headers {
			kb, kerr := base64.StdEncoding.DecodeString(k)
			vb, verr := base64.StdEncoding.DecodeString(v)
			if err := errors.Join(kerr, verr); err != nil {
				return nil, fmt.Errorf("decoding the response envelope's headers: %w", err)
			}
			r.Headers[string(kb)] = string(vb)
		}
	default:
		return nil, fmt.Errorf("decoding the response envelope: unknown headersEncoding %q", env.HeadersEncoding)
	}
	return r, nil
}

// parseEnvelope reads the envelope without reflection: a JSON object of the
// envelope's members, whose strings need no unescaping in the common case
// (a replay's body is then a substring of text). It reports false on
// anything else (an unknown member, a number that is not an integer, an
// escape it does not take as encoding/json would), and the caller falls
// back to encoding/json, which is the reference.
func parseEnvelope(text string) (envelope, bool) {
	var env envelope
	if !utf8.ValidString(text) {
		return env, false
	}
	p := envParser{s: text}
	if !p.byte('{') {
		return env, false
	}
	if p.byte('}') {
		return env, p.end()
	}
	seen := make(map[string]bool, 8)
	for {
		name, ok := p.str()
		if !ok || !p.byte(':') || seen[name] {
			return env, false // a repeated member is left to encoding/json
		}
		seen[name] = true
		switch name {
		case "status":
			if env.Status, ok = p.int(); !ok {
				return env, false
			}
		case "body":
			if env.Body, ok = p.str(); !ok {
				return env, false
			}
		case "bodyEncoding":
			if env.BodyEncoding, ok = p.str(); !ok {
				return env, false
			}
		case "headersEncoding":
			if env.HeadersEncoding, ok = p.str(); !ok {
				return env, false
			}
		case "isBase64Encoded":
			if env.IsBase64Encoded, ok = p.bool(); !ok {
				return env, false
			}
		case "notKept":
			if env.NotKept, ok = p.bool(); !ok {
				return env, false
			}
		case "headers":
			if env.Headers, ok = p.headers(); !ok {
				return env, false
			}
		case "origin":
			if env.Origin, ok = p.origin(); !ok {
				return env, false
			}
		default:
			return env, false
		}
		if p.byte('}') {
			return env, p.end()
		}
		if !p.byte(',') {
			return env, false
		}
	}
}

// envParser walks a JSON text; each method skips the white space before
// what it reads.
type envParser struct {
	s string
	i int
}

func (p *envParser) space() {
	for p.i < len(p.s) {
		switch p.s[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

// byte consumes c when it comes next.
func (p *envParser) byte(c byte) bool {
	p.space()
	if p.i < len(p.s) && p.s[p.i] == c {
		p.i++
		return true
	}
	return false
}

// end reports whether nothing but white space is left.
func (p *envParser) end() bool {
	p.space()
	return p.i == len(p.s)
}

func (p *envParser) int() (int, bool) {
	p.space()
	start := p.i
	if p.i < len(p.s) && p.s[p.i] == '-' {
		p.i++
	}
	digits := p.i
	for p.i < len(p.s) && p.s[p.i] >= '0' && p.s[p.i] <= '9' {
		p.i++
	}
	if p.i-digits > 1 && p.s[digits] == '0' {
		return 0, false // JSON writes no leading zero
	}
	n, err := strconv.Atoi(p.s[start:p.i])
	if err != nil || (p.i < len(p.s) && (p.s[p.i] == '.' || p.s[p.i] == 'e' || p.s[p.i] == 'E')) {
		return 0, false
	}
	return n, true
}

func (p *envParser) bool() (bool, bool) {
	p.space()
	switch {
	case strings.HasPrefix(p.s[p.i:], "true"):
		p.i += 4
		return true, true
	case strings.HasPrefix(p.s[p.i:], "false"):
		p.i += 5
		return false, true
	}
	return false, false
}

func (p *envParser) headers() (map[string]string, bool) {
	if !p.byte('{') {
		return nil, false
	}
	h := make(map[string]string, 4)
	if p.byte('}') {
		return h, true
	}
	for {
		k, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, false
		}
		v, ok := p.str()
		if !ok {
			return nil, false
		}
		h[k] = v
		if p.byte('}') {
			return h, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// origin reads the origin member's object: its three members, each once.
func (p *envParser) origin() (*envelopeOrigin, bool) {
	if !p.byte('{') {
		return nil, false
	}
	o := &envelopeOrigin{}
	var trace, span, at bool
	for {
		name, ok := p.str()
		if !ok || !p.byte(':') {
			return nil, false
		}
		switch {
		case name == "trace" && !trace:
			o.Trace, ok = p.str()
			trace = true
		case name == "span" && !span:
			o.Span, ok = p.str()
			span = true
		case name == "at" && !at:
			var n int
			n, ok = p.int()
			o.At, at = int64(n), true
		default:
			return nil, false // unknown or repeated: encoding/json decides
		}
		if !ok {
			return nil, false
		}
		if p.byte('}') {
			return o, true
		}
		if !p.byte(',') {
			return nil, false
		}
	}
}

// str reads a JSON string. Without escapes it is a substring of the text.
func (p *envParser) str() (string, bool) {
	if !p.byte('"') {
		return "", false
	}
	start := p.i
	for p.i < len(p.s) {
		switch c := p.s[p.i]; {
		case c == '"':
			p.i++
			return p.s[start : p.i-1], true
		case c == '\\':
			return p.unescape(start)
		case c < 0x20:
			return "", false
		}
		p.i++
	}
	return "", false
}

// unescape reads the rest of a string that holds escapes, from start (just
// after its opening quote).
func (p *envParser) unescape(start int) (string, bool) {
	b := make([]byte, 0, len(p.s)-start)
	b = append(b, p.s[start:p.i]...)
	for p.i < len(p.s) {
		c := p.s[p.i]
		switch {
		case c == '"':
			p.i++
			return string(b), true
		case c < 0x20:
			return "", false
		case c != '\\':
			b = append(b, c)
			p.i++
			continue
		}
		if p.i+1 >= len(p.s) {
			return "", false
		}
		e := p.s[p.i+1]
		p.i += 2
		switch e {
		case '"', '\\', '/':
			b = append(b, e)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, ok := p.hex4()
			if !ok {
				return "", false
			}
			if utf16.IsSurrogate(r) {
				// A pair, or encoding/json's U+FFFD: leave that to it.
				if !strings.HasPrefix(p.s[p.i:], `\u`) {
					return "", false
				}
				p.i += 2
				r2, ok := p.hex4()
				if !ok {
					return "", false
				}
				if r = utf16.DecodeRune(r, r2); r == utf8.RuneError {
					return "", false
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", false
		}
	}
	return "", false
}

func (p *envParser) hex4() (rune, bool) {
	if p.i+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.s[p.i:p.i+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.i += 4
	return rune(n), true
}
