// Package apigw gives one normalised view of the HTTP payloads a Lambda
// function receives: the two API Gateway proxy payloads, REST API events
// (payload format 1.0, events.APIGatewayProxyRequest /
// events.APIGatewayProxyResponse) and HTTP API events (payload format 2.0,
// events.APIGatewayV2HTTPRequest / events.APIGatewayV2HTTPResponse), as
// well as Lambda Function URL events (events.LambdaFunctionURLRequest /
// events.LambdaFunctionURLResponse, the 2.0 shape) and Application Load
// Balancer target group events (events.ALBTargetGroupRequest /
// events.ALBTargetGroupResponse); FromHTTPRequest gives the same view of a
// net/http request.
//
// Code that must treat both payloads alike (the idempotency decorator, a
// problem+json writer) reads a Request built with FromRequest, inspects a
// handler's answer through FromResponse, and builds an answer of the
// handler's own type with ToResponse.
package apigw

import (
	"fmt"
	"iter"
	"net/http"
	"net/url"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/problem"
)

// AnyRequest is the set of request payloads this package understands.
type AnyRequest interface {
	events.APIGatewayProxyRequest | events.APIGatewayV2HTTPRequest |
		events.LambdaFunctionURLRequest | events.ALBTargetGroupRequest
}

// AnyResponse is the set of response payloads this package understands.
type AnyResponse interface {
	events.APIGatewayProxyResponse | events.APIGatewayV2HTTPResponse |
		events.LambdaFunctionURLResponse | events.ALBTargetGroupResponse
}

// Request is the part of an API Gateway request that both payload formats
// carry, in one shape.
type Request struct {
	// Version is the payload format: 1 (REST API) or 2 (HTTP API).
	Version int
	// Method is the HTTP method in upper case.
	Method string
	// Path is the concrete path as requested (v1 "path", v2 "rawPath"),
	// never the route template.
	Path string
	// Query holds the query parameters. Values of one name keep the order
	// in which the client sent them. v1 reads multiValueQueryStringParameters
	// (falling back to queryStringParameters); v2 parses rawQueryString.
	Query url.Values
	// RawQuery is the query string exactly as the client sent it (v2
	// rawQueryString). It is empty for v1, whose parameters API Gateway has
	// already decoded. Query loses one distinction that RawQuery keeps: a
	// part that cannot be percent-decoded is kept in Query as written, so
	// "a=%zz" and "a=%25zz" both give a = "%zz".
	RawQuery string
	// Headers maps each lower-case header name to every value found for it:
	// from "headers" and, for v1, "multiValueHeaders" too. The same value can
	// therefore appear more than once.
	Headers map[string][]string
	// Body is the body exactly as API Gateway delivered it.
	Body string
	// IsBase64Encoded reports that Body is base64 text.
	IsBase64Encoded bool
	// RequestID is API Gateway's own request id (requestContext.requestId).
	RequestID string
	// Claims are the claims of a JWT authorizer (v2
	// requestContext.authorizer.jwt.claims) or a Cognito user pool
	// authorizer (v1 requestContext.authorizer.claims), as strings. Nil
	// when there are none.
	Claims map[string]string
	// AuthorizerContext is the context a Lambda authorizer returned (v2
	// requestContext.authorizer.lambda; v1 requestContext.authorizer, which
	// also holds principalId). Nil when there is none.
	AuthorizerContext map[string]any
	// IAM is the principal that signed the request, for a Lambda Function
	// URL whose AuthType is AWS_IAM. Nil otherwise.
	IAM *IAMIdentity
}

// Header returns every value of the header name (any case), as Headers
// holds them.
func (r Request) Header(name string) []string {
	return r.Headers[strings.ToLower(name)]
}

// FromRequest returns the normalised view of an API Gateway request.
func FromRequest[R AnyRequest](req R) Request {
	switch r := any(req).(type) {
	case events.APIGatewayProxyRequest:
		return fromV1(r)
	case events.APIGatewayV2HTTPRequest:
		return fromV2(r)
	case events.LambdaFunctionURLRequest:
		return fromFunctionURL(r)
	case events.ALBTargetGroupRequest:
		return fromALB(r)
	}
	panic("unreachable: AnyRequest has four members")
}

func fromV1(r events.APIGatewayProxyRequest) Request {
	out := Request{
		Version:         1,
		Method:          strings.ToUpper(r.HTTPMethod),
		Path:            r.Path,
		Query:           url.Values{},
		Headers:         map[string][]string{},
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
		RequestID:       r.RequestContext.RequestID,
	}
	if len(r.MultiValueQueryStringParameters) > 0 {
		for name, values := range r.MultiValueQueryStringParameters {
			out.Query[name] = append([]string(nil), values...)
		}
	} else {
		for name, value := range r.QueryStringParameters {
			out.Query[name] = []string{value}
		}
	}
	addHeaders(out.Headers, r.Headers, r.MultiValueHeaders)
	if len(r.RequestContext.Authorizer) > 0 {
		out.AuthorizerContext = r.RequestContext.Authorizer
		if claims, ok := r.RequestContext.Authorizer["claims"].(map[string]any); ok {
			out.Claims = make(map[string]string, len(claims))
			for name, value := range claims {
				out.Claims[name] = stringify(value)
			}
		}
	}
	return out
}

func fromV2(r events.APIGatewayV2HTTPRequest) Request {
	out := Request{
		Version:         2,
		Method:          strings.ToUpper(r.RequestContext.HTTP.Method),
		Path:            r.RawPath,
		Query:           ParseRawQuery(r.RawQueryString),
		RawQuery:        r.RawQueryString,
		Headers:         map[string][]string{},
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
		RequestID:       r.RequestContext.RequestID,
	}
	addHeaders(out.Headers, r.Headers, nil)
	if a := r.RequestContext.Authorizer; a != nil {
		if a.JWT != nil && a.JWT.Claims != nil {
			out.Claims = a.JWT.Claims
		}
		if a.Lambda != nil {
			out.AuthorizerContext = a.Lambda
		}
	}
	return out
}

// addHeaders adds a payload's single-value and multi-value headers to dst
// under lower-case names, in that order (API Gateway v1 and ALB send both).
func addHeaders(dst map[string][]string, single map[string]string, multi map[string][]string) {
	for name, value := range single {
		lower := strings.ToLower(name)
		dst[lower] = append(dst[lower], value)
	}
	for name, values := range multi {
		lower := strings.ToLower(name)
		dst[lower] = append(dst[lower], values...)
	}
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

func stringify(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
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
