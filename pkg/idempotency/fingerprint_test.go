package idempotency

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/canonjson"
)

func fingerprintOf(t *testing.T, req Request) string {
	t.Helper()
	h, err := Fingerprint(req)
	require.NoError(t, err)
	require.Len(t, h, 64)
	return h
}

func jsonRequest(body string) Request {
	return Request{Method: "POST", Path: "/tasks", Body: body}
}

func TestFingerprintCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b string
	}{
		{"key order", `{"a":1,"b":2}`, `{"b":2,"a":1}`},
		{"white space", `{"a":[1,2,{"c":null}]}`, " {\n\t\"a\" : [ 1 , 2 , { \"c\" : null } ]\r\n} "},
		{"nested key order", `{"o":{"y":true,"x":false}}`, `{"o":{"x":false,"y":true}}`},
		{"string escapes", `{"s":"é\"<>&/"}`, `{"s":"\u00e9\"\u003c\u003e\u0026\/"}`},
		{"top-level scalar", `"x"`, ` "x" `},
		{"empty object", `{}`, "{ }"},
		{"empty array", `[]`, "[\n]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, fingerprintOf(t, jsonRequest(tc.a)), fingerprintOf(t, jsonRequest(tc.b)))
		})
	}
}

func TestFingerprintDistinguishes(t *testing.T) {
	t.Parallel()
	base := Request{Method: "POST", Path: "/tasks/1", Query: url.Values{"a": {"1"}}, Body: `{"n":1}`}
	variants := map[string]Request{}
	add := func(name string, mutate func(r *Request)) {
		r := base
		r.Query = url.Values{}
		for k, v := range base.Query {
			r.Query[k] = append([]string(nil), v...)
		}
		mutate(&r)
		variants[name] = r
	}
	add("base", func(r *Request) {})
	add("method", func(r *Request) { r.Method = "PATCH" })
	add("path", func(r *Request) { r.Path = "/tasks/2" })
	add("path case", func(r *Request) { r.Path = "/Tasks/1" })
	add("query value", func(r *Request) { r.Query["a"] = []string{"2"} })
	add("query name", func(r *Request) { r.Query = url.Values{"b": {"1"}} })
	add("query extra", func(r *Request) { r.Query["b"] = []string{""} })
	add("query repeated", func(r *Request) { r.Query["a"] = []string{"1", "1"} })
	add("no query", func(r *Request) { r.Query = nil })
	add("number as written", func(r *Request) { r.Body = `{"n":1.0}` })
	add("number exponent", func(r *Request) { r.Body = `{"n":1e0}` })
	add("string, not number", func(r *Request) { r.Body = `{"n":"1"}` })
	add("array order", func(r *Request) { r.Body = `{"n":1,"l":[2,1]}` })
	add("other array order", func(r *Request) { r.Body = `{"n":1,"l":[1,2]}` })
	add("raw body", func(r *Request) { r.Body = `{"n":1` })
	add("empty body", func(r *Request) { r.Body = `` })
	// Framing: moving bytes between parts never gives the same hash.
	add("path absorbs query", func(r *Request) { r.Path = "/tasks/1a=1"; r.Query = nil })
	add("method absorbs path", func(r *Request) { r.Method = "POST/tasks/1"; r.Path = "" })
	seen := map[string]string{}
	raws := map[rawDigest]string{}
	for name, r := range variants {
		h := fingerprintOf(t, r)
		require.NotContains(t, seen, h, "%q and %q share a fingerprint", name, seen[h])
		seen[h] = name
		// Requests of different fingerprints never share a raw digest,
		// which a cached record would otherwise lend to the wrong one.
		d := rawDigestOf(r)
		require.NotContains(t, raws, d, "%q and %q share a raw digest", name, raws[d])
		raws[d] = name
	}
}

// TestRawDigest: the raw digest is a function of the request as sent, and
// tells apart what the fingerprint reads before canonicalising it.
func TestRawDigest(t *testing.T) {
	t.Parallel()
	big := strings.Repeat(`{"n":1},`, 1000)
	base := Request{Method: "POST", Path: "/tasks", RawQuery: "b=2&a=1", Query: url.Values{"a": {"1"}, "b": {"2"}}, Body: `{"n":1}`}
	variants := map[string]Request{
		"base":                       base,
		"raw query order":            {Method: "POST", Path: "/tasks", RawQuery: "a=1&b=2", Query: base.Query, Body: base.Body},
		"decoded query only":         {Method: "POST", Path: "/tasks", Query: base.Query, Body: base.Body},
		"no query":                   {Method: "POST", Path: "/tasks", Body: base.Body},
		"base64 flag":                {Method: "POST", Path: "/tasks", Body: "e30=", IsBase64Encoded: true},
		"base64 text":                {Method: "POST", Path: "/tasks", Body: "e30="},
		"spacing":                    {Method: "POST", Path: "/tasks", RawQuery: base.RawQuery, Body: `{ "n": 1 }`},
		"body past the buffer":       {Method: "POST", Path: "/tasks", Body: "[" + big + "0]"},
		"other body past the buffer": {Method: "POST", Path: "/tasks", Body: "[" + big + "1]"},
	}
	raws := map[rawDigest]string{}
	for name, r := range variants {
		d := rawDigestOf(r)
		require.NotEqual(t, rawDigest{}, d)
		require.NotContains(t, raws, d, "%q and %q share a raw digest", name, raws[d])
		raws[d] = name
		copied := r
		copied.Query = url.Values{}
		for k, v := range r.Query {
			copied.Query[k] = v
		}
		copied.Headers = map[string][]string{"x-other": {"ignored"}}
		require.Equal(t, d, rawDigestOf(copied), "%s: the same request, the same digest", name)
	}
}

func TestFingerprintQuerySorting(t *testing.T) {
	t.Parallel()
	a := fingerprintOf(t, Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("b=2&a=1&c=x%20y")})
	b := fingerprintOf(t, Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("c=x+y&b=2&a=1")})
	require.Equal(t, a, b)
	// The values of one name keep their order: an API may rely on it.
	c := fingerprintOf(t, Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("a=1&a=2")})
	d := fingerprintOf(t, Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("a=2&a=1")})
	require.NotEqual(t, c, d)
	// A v1 event and a v2 event of the same request agree.
	v1 := RequestFrom(events.APIGatewayProxyRequest{
		HTTPMethod:                      "POST",
		Path:                            "/",
		MultiValueQueryStringParameters: map[string][]string{"c": {"x y"}, "a": {"1"}, "b": {"2"}},
	})
	require.Equal(t, a, fingerprintOf(t, v1))
}

func TestFingerprintBase64(t *testing.T) {
	t.Parallel()
	plain := fingerprintOf(t, jsonRequest(`{"a":1}`))
	encoded := jsonRequest(base64.StdEncoding.EncodeToString([]byte(`{ "a": 1 }`)))
	encoded.IsBase64Encoded = true
	require.Equal(t, plain, fingerprintOf(t, encoded))

	binary := jsonRequest(base64.StdEncoding.EncodeToString([]byte{0xff, 0x00, 0xfe}))
	binary.IsBase64Encoded = true
	require.Equal(t, fingerprintOf(t, jsonRequest("\xff\x00\xfe")), fingerprintOf(t, binary))

	for _, bad := range []string{"not base64!", "YWJj=", "YQ"} {
		r := jsonRequest(bad)
		r.IsBase64Encoded = true
		_, err := Fingerprint(r)
		require.ErrorIs(t, err, errBadBase64, bad)
	}
}

// recorder is a hash.Hash that keeps what is written to it.
type recorder struct{ bytes.Buffer }

func (r *recorder) Sum(b []byte) []byte { return append(b, r.Bytes()...) }
func (r *recorder) Size() int           { return 0 }
func (r *recorder) BlockSize() int      { return 1 }

// canonical returns the canonical form of body, checking its frame.
func canonical(t *testing.T, body string) (string, bool) {
	t.Helper()
	var r recorder
	if !canonjson.Write(&r, []byte(body)) {
		return "", false
	}
	out := r.Bytes()
	require.GreaterOrEqual(t, len(out), 8)
	require.Equal(t, uint64(len(out)-8), binary.BigEndian.Uint64(out[:8]), "the frame's length is the canonical length")
	return string(out[8:]), true
}

// referenceCanonical is the canonical form as encoding/json writes it (the
// definition the streaming canonicaliser keeps), or false for a body that
// is not one JSON value, is nested deeper than canonjson.MaxDepth or repeats
// a member name.
func referenceCanonical(body []byte) (string, bool) {
	if !utf8.Valid(body) || !json.Valid(body) || nesting(body) > canonjson.MaxDepth || hasRepeatedName(body) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return "", false
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return "", false
	}
	return strings.TrimSuffix(out.String(), "\n"), true
}

// nesting returns how deeply arrays and objects nest in a valid body.
func nesting(body []byte) int {
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return deepest
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// hasRepeatedName reports whether an object of a valid body names a
// member twice (after decoding escapes).
func hasRepeatedName(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	type frame struct {
		object bool
		names  map[string]bool
		key    bool // the next string token is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if name, ok := tok.(string); ok {
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.key = false
				continue
			}
		}
		if top != nil && top.object {
			top.key = true // after this value comes a name
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, names: map[string]bool{}, key: true})
		case json.Delim('['):
			stack = append(stack, &frame{})
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].object {
				stack[len(stack)-1].key = true
			}
		}
	}
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		` { "b" : [ 1.50 , -0, 1E+3 ], "a" : "<&>" } `: `{"a":"<&>","b":[1.50,-0,1E+3]}`,
		`"\u00e9"`: `"é"`,
		`null`:     `null`,
		`{"b":{"d":1,"c":[{"z":0,"y":1}]},"a":0}`:           `{"a":0,"b":{"c":[{"y":1,"z":0}],"d":1}}`,
		`["\u2028", "\b\f\u0001\/", "\ud83d\ude00\ud800x"]`: `["\u2028","\b\f\u0001/","😀�x"]`,
		`{"\u0062":1,"a\"":2,"a":3}`:                        `{"a":3,"a\"":2,"b":1}`,
	} {
		got, ok := canonical(t, in)
		require.True(t, ok, in)
		require.Equal(t, want, got)
		ref, ok := referenceCanonical([]byte(in))
		require.True(t, ok)
		require.Equal(t, ref, got, "the same bytes as encoding/json")
	}
	for _, notJSON := range []string{``, `{`, `{"a":1} {"b":2}`, `nul`, "\"\xff\"", `{'a':1}`, `01`, `1.`, `[1,]`, `{"a":1,}`, "\"\x01\"", `"\x"`, `"\u12"`} {
		_, ok := canonical(t, notJSON)
		require.False(t, ok, notJSON)
	}
}

func TestCanonicalJSONRefusesRepeatedNames(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		`{"title":"a","title":"b"}`,
		`{"title":"b","title":"b"}`,
		`{"a":1,"\u0061":1}`,
		`[{"x":{"b":1,"a":2,"b":3}}]`,
		`{"z":0,"a":1,"m":2,"a":3}`,
	} {
		_, ok := canonical(t, body)
		require.False(t, ok, body)
	}
	// A body with a repeated name is hashed as its bytes: never as the
	// object a decoder that keeps the last (or the first) value would see.
	repeated := fingerprintOf(t, jsonRequest(`{"title":"a","title":"b"}`))
	require.NotEqual(t, fingerprintOf(t, jsonRequest(`{"title":"b"}`)), repeated)
	require.NotEqual(t, fingerprintOf(t, jsonRequest(`{"title":"a"}`)), repeated)
	require.Equal(t, repeated, fingerprintOf(t, jsonRequest(`{"title":"a","title":"b"}`)))
}

func TestCanonicalJSONDepth(t *testing.T) {
	t.Parallel()
	deep := func(n int) string { return strings.Repeat(`{"a":[`, n) + strings.Repeat(`]}`, n) }
	_, ok := canonical(t, deep(canonjson.MaxDepth/2))
	require.True(t, ok)
	_, ok = canonical(t, deep(canonjson.MaxDepth/2+1))
	require.False(t, ok, "deeper than canonjson.MaxDepth is hashed as bytes")
	require.NotEmpty(t, fingerprintOf(t, jsonRequest(deep(5000))))
}

func TestFingerprintQueryUndecodable(t *testing.T) {
	t.Parallel()
	of := func(raw string) string {
		return fingerprintOf(t, Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery(raw), RawQuery: raw})
	}
	for _, pair := range [][2]string{
		{"a=%zz", "a=%25zz"},
		{"a=%zz%41", "a=%25zz%2541"},
		{"%zz=1", "%25zz=1"},
		{"a=%zz&a=1", "a=%25zz&a=1"},
		{"a=%!zz", "a=%zz"},
	} {
		require.NotEqual(t, of(pair[0]), of(pair[1]), "%s vs %s", pair[0], pair[1])
	}
	// A query whose parts all decode hashes as its decoded parameters do,
	// so a REST API (v1) event and an HTTP API (v2) event still agree.
	require.Equal(t, of("c=x+y&b=2&a=1"), fingerprintOf(t, Request{Method: "POST", Path: "/", Query: url.Values{"a": {"1"}, "b": {"2"}, "c": {"x y"}}}))
	require.Equal(t, of("a=%zz"), of("a=%zz"))
}
