// Package apigw is the response side of the HTTP payloads a Lambda function
// answers with: the API Gateway proxy responses of payload format 1.0
// (events.APIGatewayProxyResponse) and 2.0 (events.APIGatewayV2HTTPResponse),
// Lambda Function URL responses and ALB target group responses, in one
// normalised Response; FromResponse reads a handler's answer, ToResponse
// builds one of the handler's own type, Problem renders an RFC 9457 answer.
// It also parses raw query strings without losing what cannot be decoded.
//
// It is internal: the request view (idempotency.Request) and the payload
// constraints (idempotency.AnyRequest, idempotency.AnyResponse) that appear
// in public signatures belong to package idempotency, and nothing here is
// needed to use the library.
package apigw

import (
	"iter"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// AnyResponse is the set of response payloads this package understands.
type AnyResponse interface {
	events.APIGatewayProxyResponse | events.APIGatewayV2HTTPResponse |
		events.LambdaFunctionURLResponse | events.ALBTargetGroupResponse
}

// ParseRawQuery parses an HTTP API rawQueryString into parameters, keeping
// the order of the values of one name. Unlike url.ParseQuery it never fails:
// a name or value that cannot be percent-decoded is kept as written. That
// makes the result ambiguous ("a=%zz" and "a=%25zz" both give a = "%zz");
// code that must tell such requests apart reads QueryParts instead.
func ParseRawQuery(raw string) url.Values {
	out := url.Values{}
	for p := range QueryParts(raw) {
		out[p.Name] = append(out[p.Name], p.Value)
	}
	return out
}

// QueryPart is one name=value pair of a raw query string.
type QueryPart struct {
	// Name and Value are percent-decoded ("+" is a space), or kept as
	// written when they cannot be decoded.
	Name, Value string
	// NameRaw and ValueRaw report that Name or Value could not be decoded
	// and is kept as written.
	NameRaw, ValueRaw bool
}

// QueryParts returns the parts of a raw query string in the order sent,
// skipping empty ones. Unlike the decoded values alone, a part together
// with its NameRaw and ValueRaw flags names exactly one written form.
func QueryParts(raw string) iter.Seq[QueryPart] {
	return func(yield func(QueryPart) bool) {
		for part := range strings.SplitSeq(raw, "&") {
			if part == "" {
				continue
			}
			name, value, _ := strings.Cut(part, "=")
			var p QueryPart
			p.Name, p.NameRaw = unescape(name)
			p.Value, p.ValueRaw = unescape(value)
			if !yield(p) {
				return
			}
		}
	}
}

// unescape decodes s, or returns it as written and true when it cannot.
func unescape(s string) (string, bool) {
	if u, err := url.QueryUnescape(s); err == nil {
		return u, false
	}
	return s, true
}

// Response is the part of an API Gateway response that both payload formats
// carry, in one shape.
type Response struct {
	// StatusCode is the HTTP status.
	StatusCode int
	// Headers holds the response headers under canonical names. Set-Cookie
	// holds every cookie, one value each: from a v2 response's "cookies" as
	// well as from its headers.
	Headers http.Header
	// Body is the body as the handler returned it (base64 text when
	// IsBase64Encoded).
	Body string
	// IsBase64Encoded reports that Body is base64 text.
	IsBase64Encoded bool
	// Flat, when Headers is nil, holds the headers with one value each,
	// ready for a response's "headers", and Cookies the Set-Cookie values:
	// a replay built straight into the payload's shape (ToResponse).
	Flat    map[string]string
	Cookies []string
	// Stored, when Headers and Flat are nil, is a replay's stored
	// response, for Middleware to write straight into its
	// http.ResponseWriter's headers.
	Stored *idemstore.Response
}

// setCookie is the canonical name of the one header whose values can never
// be joined into one line (RFC 6265, section 3).
const setCookie = "Set-Cookie"

// FromResponse returns the normalised view of a handler's response: the
// values of "headers" and "multiValueHeaders" are merged under canonical
// names, a name present in both taking the multi-value list, and a v2
// response's "cookies" are added to Set-Cookie.
func FromResponse[R AnyResponse](resp R) Response {
	var (
		status  int
		single  map[string]string
		multi   map[string][]string
		cookies []string
		body    string
		b64     bool
	)
	switch r := any(resp).(type) {
	case events.APIGatewayProxyResponse:
		status, single, multi, body, b64 = r.StatusCode, r.Headers, r.MultiValueHeaders, r.Body, r.IsBase64Encoded
	case events.APIGatewayV2HTTPResponse:
		status, single, multi, cookies, body, b64 = r.StatusCode, r.Headers, r.MultiValueHeaders, r.Cookies, r.Body, r.IsBase64Encoded
	case events.LambdaFunctionURLResponse:
		status, single, cookies, body, b64 = r.StatusCode, r.Headers, r.Cookies, r.Body, r.IsBase64Encoded
	case events.ALBTargetGroupResponse:
		status, single, multi, body, b64 = r.StatusCode, r.Headers, r.MultiValueHeaders, r.Body, r.IsBase64Encoded
	}
	h := http.Header{}
	for name, values := range multi {
		h[http.CanonicalHeaderKey(name)] = append(h[http.CanonicalHeaderKey(name)], values...)
	}
	for name, value := range single {
		if _, ok := h[http.CanonicalHeaderKey(name)]; !ok {
			h.Set(name, value)
		}
	}
	if len(cookies) > 0 {
		h[setCookie] = append(h[setCookie], cookies...)
	}
	return Response{StatusCode: status, Headers: h, Body: body, IsBase64Encoded: b64}
}

// ToResponse builds a response of type R. Each header goes into "headers",
// several values of one header joined with ", ", except Set-Cookie, whose
// values cannot be joined: a v2 response carries them in "cookies", a v1
// response in "multiValueHeaders".
func ToResponse[R AnyResponse](resp Response) R {
	var headers map[string]string
	var cookies []string
	if resp.Headers == nil && resp.Flat != nil {
		headers, cookies = resp.Flat, resp.Cookies
	}
	for name, values := range resp.Headers {
		if http.CanonicalHeaderKey(name) == setCookie {
			cookies = append(cookies, values...)
			continue
		}
		if headers == nil {
			headers = make(map[string]string, len(resp.Headers))
		}
		headers[name] = strings.Join(values, ", ")
	}
	var out R
	switch p := any(&out).(type) {
	case *events.APIGatewayProxyResponse:
		*p = events.APIGatewayProxyResponse{StatusCode: resp.StatusCode, Headers: headers, Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded}
		if len(cookies) > 0 {
			p.MultiValueHeaders = map[string][]string{setCookie: cookies}
		}
	case *events.APIGatewayV2HTTPResponse:
		*p = events.APIGatewayV2HTTPResponse{StatusCode: resp.StatusCode, Headers: headers, Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded, Cookies: cookies}
	case *events.LambdaFunctionURLResponse:
		*p = events.LambdaFunctionURLResponse{StatusCode: resp.StatusCode, Headers: headers, Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded, Cookies: cookies}
	case *events.ALBTargetGroupResponse:
		if resp.Headers == nil && resp.Flat != nil {
			resp.Headers = make(http.Header, len(resp.Flat)+1)
			for name, value := range resp.Flat {
				resp.Headers.Set(name, value)
			}
			if len(resp.Cookies) > 0 {
				resp.Headers[setCookie] = resp.Cookies
			}
		}
		*p = toALB(resp)
	}
	return out
}

// Problem returns an application/problem+json response for d, with status
// d.Status.
func Problem(d problem.Details) Response {
	return Response{
		StatusCode: d.Status,
		Headers:    http.Header{"Content-Type": {problem.ContentType}},
		Body:       string(d.JSON()),
	}
}
