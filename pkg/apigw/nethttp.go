package apigw

import (
	"encoding/base64"
	"net/http"
	"strings"
	"unicode/utf8"
)

// FromHTTPRequest returns the normalised view of a net/http request whose
// body was read into body, as an HTTP API (payload format 2.0) would
// deliver the same request, so that code written against Request (the
// idempotency fingerprint, a handler) sees the same values behind API
// Gateway and in a plain HTTP server: Version 2, the escaped path as sent,
// the raw query string and its parsed parameters, lower-case header names with
// every value, and a body that is not UTF-8 as base64 with IsBase64Encoded.
// Claims and AuthorizerContext are nil: a plain server has no authorizer.
func FromHTTPRequest(r *http.Request, body []byte) Request {
	out := Request{
		Version:  2,
		Method:   strings.ToUpper(r.Method),
		Path:     r.URL.EscapedPath(),
		Query:    ParseRawQuery(r.URL.RawQuery),
		RawQuery: r.URL.RawQuery,
		Headers:  make(map[string][]string, len(r.Header)),
	}
	for name, values := range r.Header {
		lower := strings.ToLower(name)
		out.Headers[lower] = append(out.Headers[lower], values...)
	}
	if utf8.Valid(body) {
		out.Body = string(body)
	} else {
		out.Body = base64.StdEncoding.EncodeToString(body)
		out.IsBase64Encoded = true
	}
	return out
}
