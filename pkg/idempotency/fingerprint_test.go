package idempotency

import (
	"encoding/base64"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/apigw"
)

func fingerprintOf(t *testing.T, req apigw.Request) string {
	t.Helper()
	h, err := Fingerprint(req)
	require.NoError(t, err)
	require.Len(t, h, 64)
	return h
}

func jsonRequest(body string) apigw.Request {
	return apigw.Request{Method: "POST", Path: "/tasks", Body: body}
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
	base := apigw.Request{Method: "POST", Path: "/tasks/1", Query: url.Values{"a": {"1"}}, Body: `{"n":1}`}
	variants := map[string]apigw.Request{}
	add := func(name string, mutate func(r *apigw.Request)) {
		r := base
		r.Query = url.Values{}
		for k, v := range base.Query {
			r.Query[k] = append([]string(nil), v...)
		}
		mutate(&r)
		variants[name] = r
	}
	add("base", func(r *apigw.Request) {})
	add("method", func(r *apigw.Request) { r.Method = "PATCH" })
	add("path", func(r *apigw.Request) { r.Path = "/tasks/2" })
	add("path case", func(r *apigw.Request) { r.Path = "/Tasks/1" })
	add("query value", func(r *apigw.Request) { r.Query["a"] = []string{"2"} })
	add("query name", func(r *apigw.Request) { r.Query = url.Values{"b": {"1"}} })
	add("query extra", func(r *apigw.Request) { r.Query["b"] = []string{""} })
	add("query repeated", func(r *apigw.Request) { r.Query["a"] = []string{"1", "1"} })
	add("no query", func(r *apigw.Request) { r.Query = nil })
	add("number as written", func(r *apigw.Request) { r.Body = `{"n":1.0}` })
	add("number exponent", func(r *apigw.Request) { r.Body = `{"n":1e0}` })
	add("string, not number", func(r *apigw.Request) { r.Body = `{"n":"1"}` })
	add("array order", func(r *apigw.Request) { r.Body = `{"n":1,"l":[2,1]}` })
	add("other array order", func(r *apigw.Request) { r.Body = `{"n":1,"l":[1,2]}` })
	add("raw body", func(r *apigw.Request) { r.Body = `{"n":1` })
	add("empty body", func(r *apigw.Request) { r.Body = `` })
	// Framing: moving bytes between parts never gives the same hash.
	add("path absorbs query", func(r *apigw.Request) { r.Path = "/tasks/1a=1"; r.Query = nil })
	add("method absorbs path", func(r *apigw.Request) { r.Method = "POST/tasks/1"; r.Path = "" })
	seen := map[string]string{}
	for name, r := range variants {
		h := fingerprintOf(t, r)
		require.NotContains(t, seen, h, "%q and %q share a fingerprint", name, seen[h])
		seen[h] = name
	}
}

func TestFingerprintQuerySorting(t *testing.T) {
	t.Parallel()
	a := fingerprintOf(t, apigw.Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("b=2&a=1&c=x%20y")})
	b := fingerprintOf(t, apigw.Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("c=x+y&b=2&a=1")})
	require.Equal(t, a, b)
	// The values of one name keep their order: an API may rely on it.
	c := fingerprintOf(t, apigw.Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("a=1&a=2")})
	d := fingerprintOf(t, apigw.Request{Method: "POST", Path: "/", Query: apigw.ParseRawQuery("a=2&a=1")})
	require.NotEqual(t, c, d)
	// A v1 event and a v2 event of the same request agree.
	v1 := apigw.FromRequest(events.APIGatewayProxyRequest{
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

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		` { "b" : [ 1.50 , -0, 1E+3 ], "a" : "<&>" } `: `{"a":"<&>","b":[1.50,-0,1E+3]}`,
		`"\u00e9"`: `"é"`,
		`null`:     `null`,
	} {
		got, ok := canonicalJSON([]byte(in))
		require.True(t, ok, in)
		require.Equal(t, want, string(got))
	}
	for _, notJSON := range []string{``, `{`, `{"a":1} {"b":2}`, `nul`, "\"\xff\"", `{'a':1}`} {
		_, ok := canonicalJSON([]byte(notJSON))
		require.False(t, ok, notJSON)
	}
}
