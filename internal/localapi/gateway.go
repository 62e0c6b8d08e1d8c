package localapi

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"
)

// Handler is a function behind the gateway: the Lambda handler of a
// function that takes HTTP API (payload 2.0) events.
type Handler func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Config configures a Gateway.
type Config struct {
	// Routes are the API's routes, usually those of template.yaml. Required.
	Routes []Route
	// Handlers maps each route's function logical id to its handler. Every
	// route's function must have one.
	Handlers map[string]Handler
	// AccessLog receives one line per request. Defaults to io.Discard.
	AccessLog io.Writer
	// Logger receives what the client is not told: function errors and
	// panics, invalid responses. Defaults to slog.Default().
	Logger *slog.Logger
	// Timeout bounds each function call: it is the deadline of the context
	// the function gets, as a Lambda's configured timeout is. Defaults to
	// 30 seconds, API Gateway's integration timeout.
	Timeout time.Duration
	// MaxBodyBytes is the largest request body accepted; larger ones get
	// 413. Defaults to 10 MiB, API Gateway's payload limit.
	MaxBodyBytes int64
	// CORS is the API's CORS configuration; nil answers no preflight
	// (an OPTIONS request is then routed like any other) and adds no CORS
	// headers. Defaults to nil.
	CORS *CORS
	// Now is the clock of the request context and of token expiry.
	// Defaults to time.Now.
	Now func() time.Time
}

// Gateway is an http.Handler that serves the routes as API Gateway's HTTP
// API with a JWT authorizer would.
type Gateway struct {
	router   *router
	handlers map[string]Handler
	log      *slog.Logger
	timeout  time.Duration
	maxBody  int64
	now      func() time.Time
	cors     *CORS

	accessMu  sync.Mutex
	accessLog io.Writer
}

// ErrNoHandler is returned by New when a route's function has no handler.
var ErrNoHandler = errors.New("localapi: no handler for the route's function")

// New checks the configuration and returns a Gateway.
func New(cfg Config) (*Gateway, error) {
	if len(cfg.Routes) == 0 {
		return nil, errors.New("localapi: no routes: the template declares no HttpApi events")
	}
	rt, err := newRouter(cfg.Routes)
	if err != nil {
		return nil, err
	}
	for _, r := range cfg.Routes {
		if cfg.Handlers[r.Function] == nil {
			return nil, fmt.Errorf("%w: route %q needs %q", ErrNoHandler, r.Key(), r.Function)
		}
	}
	g := &Gateway{
		router:    rt,
		handlers:  cfg.Handlers,
		log:       cfg.Logger,
		timeout:   cfg.Timeout,
		maxBody:   cfg.MaxBodyBytes,
		now:       cfg.Now,
		accessLog: cfg.AccessLog,
		cors:      cfg.CORS,
	}
	if g.log == nil {
		g.log = slog.Default()
	}
	if g.timeout <= 0 {
		g.timeout = 30 * time.Second
	}
	if g.maxBody <= 0 {
		g.maxBody = 10 << 20
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.accessLog == nil {
		g.accessLog = io.Discard
	}
	return g, nil
}

// Gateway's own answers, byte for byte as API Gateway gives them.
var (
	bodyNotFound      = []byte(`{"message":"Not Found"}`)
	bodyUnauthorized  = []byte(`{"message":"Unauthorized"}`)
	bodyInternalError = []byte(`{"message":"Internal Server Error"}`)
	bodyTooLarge      = []byte(`{"message":"Request Entity Too Large"}`)
)

// ServeHTTP answers one request: route, authorize, build the event, call
// the function, write its response.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := g.now()
	requestID := newRequestID()
	rec := &recorder{ResponseWriter: w}
	rec.Header().Set("Apigw-Requestid", requestID)
	function := g.serve(rec, r, requestID, start)
	g.logAccess(r, rec, requestID, function, start)
}

// serve writes the response and returns the logical id of the function that
// ran, or "-" when the gateway answered by itself.
func (g *Gateway) serve(w http.ResponseWriter, r *http.Request, requestID string, now time.Time) string {
	if g.cors != nil {
		if isPreflight(r) {
			g.cors.preflight(w, r)
			return "-"
		}
		w = &corsWriter{ResponseWriter: w, cors: g.cors, r: r}
	}
	route, params, ok := g.router.find(r.Method, r.URL.EscapedPath())
	if !ok {
		writeGateway(w, http.StatusNotFound, bodyNotFound, "")
		return "-"
	}
	// Repeated Authorization headers reach the authorizer joined with
	// commas, as every repeated header does, and fail to parse.
	identity, err := Authorize(strings.Join(r.Header.Values("Authorization"), ","), now)
	if err != nil {
		writeGateway(w, http.StatusUnauthorized, bodyUnauthorized, wwwAuthenticate(err))
		return "-"
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, g.maxBody+1))
	if err != nil {
		writeGateway(w, http.StatusBadRequest, []byte(`{"message":"Bad Request"}`), "")
		return "-"
	}
	if int64(len(body)) > g.maxBody {
		writeGateway(w, http.StatusRequestEntityTooLarge, bodyTooLarge, "")
		return "-"
	}
	ev := buildEvent(r, eventInput{
		route:     route.Route,
		params:    params,
		identity:  &identity,
		requestID: requestID,
		now:       now,
		body:      body,
	})
	resp, err := g.invoke(r.Context(), route.Function, ev)
	if err != nil {
		g.log.Error("function failed", "function", route.Function, "requestId", requestID, "error", err)
		writeGateway(w, http.StatusInternalServerError, bodyInternalError, "")
		return route.Function
	}
	if err := writeResponse(w, resp); err != nil {
		g.log.Error("invalid function response", "function", route.Function, "requestId", requestID, "error", err)
		writeGateway(w, http.StatusInternalServerError, bodyInternalError, "")
	}
	return route.Function
}

// invoke calls a function as Lambda would: the event and the response go
// through JSON, the context has a deadline and a Lambda context with an
// AWS request id, and a panic is a function error.
func (g *Gateway) invoke(ctx context.Context, function string, ev events.APIGatewayV2HTTPRequest) (resp events.APIGatewayV2HTTPResponse, err error) {
	var in events.APIGatewayV2HTTPRequest
	if err := roundTrip(ev, &in); err != nil {
		return resp, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), g.timeout)
	defer cancel()
	ctx = lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{
		AwsRequestID:       uuid.NewString(),
		InvokedFunctionArn: "arn:aws:lambda:us-east-1:" + LocalAccountID + ":function:" + function,
	})
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	out, err := g.handlers[function](ctx, in)
	if err != nil {
		return resp, err
	}
	err = roundTrip(out, &resp)
	return resp, err
}

func roundTrip(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// InvalidResponseError reports a function response that API Gateway would
// refuse (and answer with 500).
type InvalidResponseError struct {
	// Reason says what is wrong with the response.
	Reason string
}

func (e *InvalidResponseError) Error() string {
	return "localapi: invalid function response: " + e.Reason
}

// writeResponse turns a function's response into HTTP.
func writeResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) error {
	if resp.StatusCode < 100 || resp.StatusCode > 599 {
		return &InvalidResponseError{Reason: fmt.Sprintf("statusCode %d", resp.StatusCode)}
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		b, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			return &InvalidResponseError{Reason: "isBase64Encoded, but the body is not base64"}
		}
		body = b
	}
	h := w.Header()
	for name, value := range resp.Headers {
		h.Set(name, value)
	}
	for name, values := range resp.MultiValueHeaders {
		canonical := http.CanonicalHeaderKey(name)
		if _, single := resp.Headers[name]; single {
			h.Del(canonical)
		}
		for _, v := range values {
			h.Add(canonical, v)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	if _, ok := h["Content-Type"]; !ok {
		h["Content-Type"] = nil // no sniffing: API Gateway sends what it got
	}
	w.WriteHeader(resp.StatusCode)
	if len(body) > 0 && bodyAllowed(resp.StatusCode) {
		_, _ = w.Write(body)
	}
	return nil
}

func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

func writeGateway(w http.ResponseWriter, status int, body []byte, authenticate string) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if authenticate != "" {
		h.Set("Www-Authenticate", authenticate)
	}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

// wwwAuthenticate is the header API Gateway's JWT authorizer sends with a
// refused token.
func wwwAuthenticate(err error) string {
	var desc string
	switch {
	case errors.Is(err, ErrNoToken):
		return ""
	case errors.Is(err, ErrTokenExpired):
		desc = "the token has expired"
	case errors.Is(err, ErrTokenNotYetValid):
		desc = "the token is not valid yet"
	default:
		desc = "the token is malformed"
	}
	return `Bearer scope="" error="invalid_token" error_description="` + desc + `"`
}

// recorder remembers the status and size of a response for the access log.
type recorder struct {
	http.ResponseWriter
	status int
	bytes  int
}

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	n, err := r.ResponseWriter.Write(b)
	r.bytes += n
	return n, err
}

// logAccess writes one line in API Gateway's CLF access log format, with
// the function and the latency added:
//
//	127.0.0.1 - - [12/Mar/2020:19:03:58 +0000] "POST /tasks HTTP/1.1" 201 187 JKJaXmPLvHcESHA= CreateTaskFunction 12ms
func (g *Gateway) logAccess(r *http.Request, rec *recorder, requestID, function string, start time.Time) {
	target := r.URL.EscapedPath()
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	target = strings.ReplaceAll(target, `"`, "%22")
	line := fmt.Sprintf("%s - - [%s] \"%s %s %s\" %d %d %s %s %s\n",
		sourceIP(r), start.UTC().Format(requestTimeLayout),
		r.Method, target, r.Proto, rec.status, rec.bytes,
		requestID, function, roundLatency(g.now().Sub(start)))
	g.accessMu.Lock()
	defer g.accessMu.Unlock()
	_, _ = io.WriteString(g.accessLog, line)
}

func roundLatency(d time.Duration) time.Duration {
	if d > time.Millisecond {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Microsecond)
}
