package idempotency

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// AnyRequest is the set of request payloads Wrap and the user extractors understand: the
// API Gateway proxy payloads 1.0 and 2.0, Lambda Function URLs and ALB
// target groups.
type AnyRequest interface {
	events.APIGatewayProxyRequest | events.APIGatewayV2HTTPRequest |
		events.LambdaFunctionURLRequest | events.ALBTargetGroupRequest
}

// AnyResponse is the set of response payloads Wrap answers with, one for each AnyRequest.
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
	// PathParameters are the route's path parameters by name: API Gateway's, or
	// a ServeMux pattern's wildcards. Nil when none.
	PathParameters map[string]string
	// Query holds the query parameters, the values of one name in the
	// order the client sent them.
	Query url.Values
	// RawQuery is the query string exactly as sent. It is empty for v1, whose
	// parameters API Gateway decoded.
	RawQuery string
	// Headers maps each lower-case header name to every value found for it
	// (for v1, in "headers" and "multiValueHeaders" both).
	Headers map[string][]string
	// Body is the body as API Gateway delivered it, or as a net/http
	// request's bytes arrived.
	Body string
	// IsBase64Encoded reports that Body is base64 text (never for net/http).
	IsBase64Encoded bool
	// RequestID is API Gateway's own request id (requestContext.requestId).
	RequestID string
	// Claims holds a JWT or Cognito authorizer's claims as strings, or nil.
	Claims map[string]string
	// AuthorizerContext is what a Lambda authorizer returned (v1: with
	// principalId), or nil.
	AuthorizerContext map[string]any
	// IAM is the principal that signed the request, for a Lambda Function
	// URL whose AuthType is AWS_IAM. Nil otherwise.
	IAM *IAMIdentity
}

// Header returns every value of the header name (any case), as Headers
// holds them.
func (r Request) Header(name string) []string {
	return r.Headers[lowerHeaderName(name)]
}

// RequestFrom returns the normalised view of an API Gateway request.
func RequestFrom[R AnyRequest](req R) Request {
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
		Headers:         make(map[string][]string, len(r.Headers)+len(r.MultiValueHeaders)),
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
		RequestID:       r.RequestContext.RequestID,
		PathParameters:  r.PathParameters,
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
		Query:           apigw.ParseRawQuery(r.RawQueryString),
		RawQuery:        r.RawQueryString,
		Headers:         make(map[string][]string, len(r.Headers)),
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
		RequestID:       r.RequestContext.RequestID,
		PathParameters:  r.PathParameters,
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
	// One array holds every single value: each name gets a slice of it with
	// no room to grow, so a second value under the same name copies.
	values := make([]string, 0, len(single))
	for name, value := range single {
		lower := strings.ToLower(name)
		if have, ok := dst[lower]; ok {
			dst[lower] = append(have, value)
			continue
		}
		values = append(values, value)
		n := len(values)
		dst[lower] = values[n-1 : n : n]
	}
	for name, values := range multi {
		lower := strings.ToLower(name)
		dst[lower] = append(dst[lower], values...)
	}
}

// IAMIdentity is the AWS principal that signed a request (SigV4), as a
// Lambda Function URL with AuthType AWS_IAM reports it.
type IAMIdentity struct {
	// AccountID is the caller's AWS account.
	AccountID string
	// UserARN is the caller's ARN (a user, or an assumed role's session).
	UserARN string
	// UserID is the principal's unique id (AIDA…, or AROA…:session).
	UserID string
	// CallerID is the caller's id as IAM gives it.
	CallerID string
	// AccessKey is the access key the request was signed with.
	AccessKey string
}

// fromFunctionURL is a Lambda Function URL request: the HTTP API 2.0 shape,
// with the caller's IAM identity when the URL's AuthType is AWS_IAM.
func fromFunctionURL(r events.LambdaFunctionURLRequest) Request {
	v2 := events.APIGatewayV2HTTPRequest{
		RawPath:         r.RawPath,
		RawQueryString:  r.RawQueryString,
		Headers:         r.Headers,
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
	}
	v2.RequestContext.HTTP.Method = r.RequestContext.HTTP.Method
	v2.RequestContext.RequestID = r.RequestContext.RequestID
	out := fromV2(v2)
	if a := r.RequestContext.Authorizer; a != nil && a.IAM != nil {
		out.IAM = &IAMIdentity{
			AccountID: a.IAM.AccountID,
			UserARN:   a.IAM.UserARN,
			UserID:    a.IAM.UserID,
			CallerID:  a.IAM.CallerID,
			AccessKey: a.IAM.AccessKey,
		}
	}
	return out
}

// fromALB is an Application Load Balancer target group request. The load
// balancer passes the query string's names and values as the client wrote
// them, still percent-encoded; they are decoded here (RawQuery rebuilds the
// query from them, names sorted, which is all the fingerprint needs). The
// headers are those of "multiValueHeaders" when the target group has
// multi-value headers on, else of "headers". An ALB has no request id and
// no authorizer: its OIDC or Cognito authentication reaches the target as
// x-amzn-oidc-* headers.
func fromALB(r events.ALBTargetGroupRequest) Request {
	out := Request{
		Version:         1,
		Method:          strings.ToUpper(r.HTTPMethod),
		Path:            r.Path,
		Headers:         make(map[string][]string, len(r.Headers)+len(r.MultiValueHeaders)),
		Body:            r.Body,
		IsBase64Encoded: r.IsBase64Encoded,
	}
	query := r.MultiValueQueryStringParameters
	if len(query) == 0 && len(r.QueryStringParameters) > 0 {
		query = make(map[string][]string, len(r.QueryStringParameters))
		for name, value := range r.QueryStringParameters {
			query[name] = []string{value}
		}
	}
	names := make([]string, 0, len(query))
	for name := range query {
		names = append(names, name)
	}
	slices.Sort(names)
	var raw strings.Builder
	for _, name := range names {
		for _, value := range query[name] {
			if raw.Len() > 0 {
				raw.WriteByte('&')
			}
			raw.WriteString(name)
			raw.WriteByte('=')
			raw.WriteString(value)
		}
	}
	out.RawQuery = raw.String()
	out.Query = apigw.ParseRawQuery(out.RawQuery)
	addHeaders(out.Headers, r.Headers, r.MultiValueHeaders)
	return out
}

// RequestFromHTTP returns the normalised view of a net/http request whose body
// was read into body. It is the request as an HTTP API (payload format 2.0)
// would deliver it. So code written against Request, such as the fingerprint or
// a handler, sees the same values behind API Gateway and in a plain HTTP
// server. The view has Version 2 and the escaped path as sent. It has the raw
// query string and its parsed parameters, and lower-case header names with
// every value. The body's bytes are as they are, never base64. Claims and
// AuthorizerContext are nil: a plain server has no authorizer.
func RequestFromHTTP(r *http.Request, body []byte) Request {
	return requestFromHTTP(r, string(body))
}

// requestFromHTTP is RequestFromHTTP with the body as a string: Middleware
// passes the bytes it read, which nothing writes to afterwards, without a
// copy.
func requestFromHTTP(r *http.Request, body string) Request {
	out := Request{
		Version:  2,
		Method:   strings.ToUpper(r.Method),
		Path:     r.URL.EscapedPath(),
		Query:    apigw.ParseRawQuery(r.URL.RawQuery),
		RawQuery: r.URL.RawQuery,
		Headers:  make(map[string][]string, len(r.Header)),
		Body:     body,

		PathParameters: patternParameters(r),
	}
	// One array holds every value, each name a slice of it with no room to
	// grow, as in addHeaders.
	n := 0
	for _, values := range r.Header {
		n += len(values)
	}
	all := make([]string, 0, n)
	for name, values := range r.Header {
		lower := lowerHeaderName(name)
		if have, ok := out.Headers[lower]; ok {
			// Two spellings of one name, in a Header built by hand.
			out.Headers[lower] = append(have, values...)
			continue
		}
		start := len(all)
		all = append(all, values...)
		out.Headers[lower] = all[start:len(all):len(all)]
	}
	return out
}

// lowerHeaderName is name in lower case. The names most requests carry, in
// the canonical form net/http gives them, come from a table rather than a
// new string each.
func lowerHeaderName(name string) string {
	if lower, ok := commonLowerHeaders[name]; ok {
		return lower
	}
	return strings.ToLower(name)
}

var commonLowerHeaders = func() map[string]string {
	names := []string{
		"Accept", "Accept-Charset", "Accept-Encoding", "Accept-Language", "Authorization",
		"Cache-Control", "Connection", "Content-Encoding", "Content-Language", "Content-Length",
		"Content-Md5", "Content-Type", "Cookie", "Date", "Expect", "Forwarded", "From", "Host",
		"Idempotency-Key", "If-Match", "If-Modified-Since", "If-None-Match", "If-Range",
		"If-Unmodified-Since", "Keep-Alive", "Origin", "Pragma", "Priority", "Range", "Referer",
		"Sec-Ch-Ua", "Sec-Ch-Ua-Mobile", "Sec-Ch-Ua-Platform", "Sec-Fetch-Dest", "Sec-Fetch-Mode",
		"Sec-Fetch-Site", "Sec-Fetch-User", "Te", "Traceparent", "Tracestate", "Baggage",
		"Upgrade", "User-Agent", "Via", "X-Amz-Date", "X-Amz-Security-Token", "X-Amzn-Trace-Id",
		"X-Api-Key", "X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Port",
		"X-Forwarded-Proto", "X-Real-Ip", "X-Request-Id", "X-Requested-With",
	}
	m := make(map[string]string, len(names))
	for _, n := range names {
		m[n] = strings.ToLower(n)
	}
	return m
}()

func stringify(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return fmt.Sprint(v)
}
