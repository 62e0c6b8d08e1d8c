package localapi

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
)

// Fixed parts of the request context: there is no AWS account locally.
const (
	// LocalAccountID is requestContext.accountId in local events.
	LocalAccountID = "123456789012"
	// LocalAPIID is requestContext.apiId in local events.
	LocalAPIID = "local"
	// Stage is requestContext.stage: an HTTP API's default stage.
	Stage = "$default"
)

// requestTimeLayout is the format of requestContext.time, e.g.
// "12/Mar/2020:19:03:58 +0000".
const requestTimeLayout = "02/Jan/2006:15:04:05 -0700"

// eventInput is what an event is built from besides the HTTP request.
type eventInput struct {
	route     Route
	params    map[string]string
	identity  *Identity
	requestID string
	now       time.Time
	body      []byte
}

// buildEvent turns an HTTP request into the payload format 2.0 event API
// Gateway would send for it.
func buildEvent(r *http.Request, in eventInput) events.APIGatewayV2HTTPRequest {
	rawPath := r.URL.EscapedPath()
	ev := events.APIGatewayV2HTTPRequest{
		Version:        "2.0",
		RouteKey:       in.route.Key(),
		RawPath:        rawPath,
		RawQueryString: r.URL.RawQuery,
		Headers:        eventHeaders(r, len(in.body)),
		PathParameters: in.params,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			RouteKey:     in.route.Key(),
			AccountID:    LocalAccountID,
			Stage:        Stage,
			RequestID:    in.requestID,
			APIID:        LocalAPIID,
			DomainName:   hostOnly(r.Host),
			DomainPrefix: strings.SplitN(hostOnly(r.Host), ".", 2)[0],
			Time:         in.now.UTC().Format(requestTimeLayout),
			TimeEpoch:    in.now.UnixMilli(),
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{
				Method:    r.Method,
				Path:      rawPath,
				Protocol:  r.Proto,
				SourceIP:  sourceIP(r),
				UserAgent: r.UserAgent(),
			},
		},
	}
	for _, line := range r.Header.Values("Cookie") {
		for _, c := range strings.Split(line, ";") {
			if c = strings.TrimSpace(c); c != "" {
				ev.Cookies = append(ev.Cookies, c)
			}
		}
	}
	if q := queryParameters(r.URL.RawQuery); len(q) > 0 {
		ev.QueryStringParameters = q
	}
	if in.identity != nil {
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: in.identity.Claims,
				Scopes: in.identity.Scopes,
			},
		}
	}
	if len(in.body) > 0 {
		if isTextContent(r.Header.Get("Content-Type")) {
			ev.Body = string(in.body)
		} else {
			ev.Body = base64.StdEncoding.EncodeToString(in.body)
			ev.IsBase64Encoded = true
		}
	}
	return ev
}

// eventHeaders lower-cases header names and joins repeated headers with
// commas, as an HTTP API does; the Cookie header goes to the cookies field
// instead. Host and Content-Length, which net/http keeps out of
// Request.Header, are put back, and the headers API Gateway adds are added.
func eventHeaders(r *http.Request, bodyLen int) map[string]string {
	h := make(map[string]string, len(r.Header)+6)
	for name, values := range r.Header {
		name = strings.ToLower(name)
		if name == "cookie" {
			continue
		}
		h[name] = strings.Join(values, ",")
	}
	h["host"] = r.Host
	if bodyLen > 0 || r.ContentLength > 0 {
		h["content-length"] = strconv.Itoa(bodyLen)
	}
	ip := sourceIP(r)
	if prior, ok := h["x-forwarded-for"]; ok && prior != "" {
		h["x-forwarded-for"] = prior + ", " + ip
	} else {
		h["x-forwarded-for"] = ip
	}
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		h["x-forwarded-port"] = port
	} else {
		h["x-forwarded-port"] = "80"
	}
	h["x-forwarded-proto"] = "http"
	h["x-amzn-trace-id"] = traceID(time.Now())
	return h
}

// queryParameters decodes a raw query string as an HTTP API does:
// repeated parameters joined with commas, in the order given.
func queryParameters(raw string) map[string]string {
	if raw == "" {
		return nil
	}
	q := map[string]string{}
	for _, pair := range strings.Split(raw, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		key, err := url.QueryUnescape(k)
		if err != nil {
			key = k
		}
		val, err := url.QueryUnescape(v)
		if err != nil {
			val = v
		}
		if prior, ok := q[key]; ok {
			q[key] = prior + "," + val
		} else {
			q[key] = val
		}
	}
	return q
}

// isTextContent reports whether an HTTP API passes a body of this content
// type as text. It does so only for text/* and application/json, xml and
// javascript; everything else, a missing Content-Type and form data among
// them, arrives base64-encoded.
func isTextContent(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	if strings.HasPrefix(mt, "text/") {
		return true
	}
	switch mt {
	case "application/json", "application/xml", "application/javascript":
		return true
	}
	return false
}

func sourceIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func hostOnly(hostport string) string {
	if host, _, err := net.SplitHostPort(hostport); err == nil {
		return host
	}
	return hostport
}

// newRequestID returns an id shaped like API Gateway's (16 characters of
// base64, e.g. "JKJaXmPLvHcESHA=").
func newRequestID() string {
	b := make([]byte, 11)
	_, _ = rand.Read(b)
	return base64.StdEncoding.EncodeToString(b)
}

// traceID returns an X-Ray style trace header value.
func traceID(now time.Time) string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return fmt.Sprintf("Root=1-%08x-%s", now.Unix(), hex.EncodeToString(b))
}
