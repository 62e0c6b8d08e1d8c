package idempotency

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/canonjson"
)

func FuzzParseKey(f *testing.F) {
	for _, seed := range []string{
		keyA,
		strings.ToUpper(keyA),
		`"` + keyA + `"`,
		" " + keyA + "\t",
		keyA + "," + keyA,
		keyA + "," + keyB,
		"",
		`""`,
		`"`,
		",",
		"8e03978e-40d5-13e8-bc93-6894a57f9324",
		"8e03978e-40d5-43e8-cc93-6894a57f9324",
		"{" + keyA + "}",
		"\xff\xfe",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		key, err := parseKey([]string{value}, KeyUUIDv4)
		if err != nil {
			require.Empty(t, key)
			return
		}
		// A parsed key is a canonical lower-case UUID v4 ...
		require.True(t, isUUIDv4(key), key)
		require.Equal(t, strings.ToLower(key), key)
		// ... that parses to itself in every accepted form.
		for _, form := range []string{key, strings.ToUpper(key), `"` + key + `"`, key + ", " + key} {
			again, err := parseKey([]string{form}, KeyUUIDv4)
			require.NoError(t, err, form)
			require.Equal(t, key, again)
		}
		// A different valid key next to it is refused.
		other := keyA
		if key == keyA {
			other = keyB
		}
		_, err = parseKey([]string{value, other}, KeyUUIDv4)
		require.ErrorIs(t, err, errKeyInvalid)
	})
}

func FuzzFingerprint(f *testing.F) {
	for _, seed := range []struct {
		method, path, query, body string
		b64                       bool
	}{
		{"POST", "/tasks", "", `{"title":"x","done":false}`, false},
		{"PATCH", "/tasks/1", "b=2&a=1", `{"n":1.50,"l":[1e3,-0,null],"o":{"z":{},"a":[]}}`, false},
		{"DELETE", "/tasks/1", "a=%zz&&=", "", false},
		{"POST", "/", "", `"\u00e9\ud83d\ude00<>&"`, false},
		{"POST", "/", "", "plain text\n", false},
		{"POST", "/", "", base64.StdEncoding.EncodeToString([]byte(`{"a":1}`)), true},
		{"POST", "/", "", "not base64", true},
		{"POST", "/", "", `{"a":1,"a":2}`, false},
		{"POST", "/", "", "[[[[[[[[[[]]]]]]]]]]", false},
		{"POST", "/", "", "\xff{}", false},
		{"POST", "/", "", `{"b":{"d":[{"z":1,"y":"\u2028"}],"c":0},"a":"\ud800\u00e9\/"}`, false},
		{"POST", "/", "", `{"\u0062":1,"a\"":2,"a":{"a":1,"\u0061":2}}`, false},
		{"POST", "/", "", strings.Repeat("[", 65) + strings.Repeat("]", 65), false},
		{"POST", "/", "a=%zz%41&a=%25zz%2541", `[{},{"":0}]`, false},
	} {
		f.Add(seed.method, seed.path, seed.query, seed.body, seed.b64)
	}
	f.Fuzz(func(t *testing.T, method, path, query, body string, b64 bool) {
		req := Request{Method: method, Path: path, Query: apigw.ParseRawQuery(query), RawQuery: query, Body: body, IsBase64Encoded: b64}
		h, err := Fingerprint(req)
		if err != nil {
			require.ErrorIs(t, err, errBadBase64)
			return
		}
		require.Len(t, h, 64)
		again, err := Fingerprint(req)
		require.NoError(t, err)
		require.Equal(t, h, again, "the fingerprint is deterministic")

		raw := []byte(body)
		if b64 {
			raw, err = base64.StdEncoding.DecodeString(body)
			require.NoError(t, err)
		}
		// The streaming canonicaliser writes what encoding/json writes, and
		// refuses exactly the bodies the reference refuses.
		want, wantOK := referenceCanonical(raw)
		var rec recorder
		gotOK := canonjson.Write(&rec, raw)
		require.Equal(t, wantOK, gotOK, "body %q", raw)
		if !wantOK {
			return
		}
		require.Equal(t, want, string(rec.Bytes()[8:]), "body %q", raw)
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		require.NoError(t, dec.Decode(&v))
		reencoded, err := json.Marshal(v)
		require.NoError(t, err)
		var indented bytes.Buffer
		require.NoError(t, json.Indent(&indented, reencoded, " ", "\t"))
		for _, form := range []Request{
			{Method: method, Path: path, Query: req.Query, RawQuery: query, Body: string(reencoded)},
			{Method: method, Path: path, Query: req.Query, RawQuery: query, Body: indented.String()},
			{Method: method, Path: path, Query: req.Query, RawQuery: query, Body: base64.StdEncoding.EncodeToString(indented.Bytes()), IsBase64Encoded: true},
		} {
			other, err := Fingerprint(form)
			require.NoError(t, err)
			require.Equal(t, h, other, "body %q vs %q", raw, form.Body)
		}
	})
}
