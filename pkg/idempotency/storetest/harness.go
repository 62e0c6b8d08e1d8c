package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// errInjected is the failure a faultyStore reports when told to fail.
var errInjected = errors.New("injected store failure")

// faultyStore wraps a Store, counts its calls and fails on demand.
type faultyStore struct {
	inner                                idemstore.Store
	claims, completes, releases, renews  atomic.Int32
	failClaim, failComplete, failRelease atomic.Bool
	failRenew                            atomic.Bool
	// lostRenew makes every renewal answer ErrLeaseLost, as after another
	// invocation took the key over.
	lostRenew atomic.Bool
	// lostClaimReplies is how many of the next claims reach the inner Store
	// (and commit there) but answer with a failure, as when the reply is
	// lost on the way back.
	lostClaimReplies atomic.Int32
	// failCompletes is how many of the next completions fail.
	failCompletes atomic.Int32
	// refuseClaim makes every claim fail as a store refuses it for good.
	refuseClaim atomic.Bool
	// refuseRenew makes every renewal fail as a store refuses it for good.
	refuseRenew atomic.Bool
	// tooLarge makes every completion but the not-kept marker's fail as a
	// store refuses a response over its largest record.
	tooLarge atomic.Bool
	// claimDelay (nanoseconds) is added to every claim, after the store
	// answered: a slow store.
	claimDelay atomic.Int64
}

func (s *faultyStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	s.claims.Add(1)
	if s.failClaim.Load() {
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errInjected}
	}
	if s.refuseClaim.Load() {
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errInjected, Permanent: true}
	}
	res, err := s.inner.Claim(ctx, c)
	if d := s.claimDelay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	if err == nil && s.lostClaimReplies.Add(-1) >= 0 {
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errInjected}
	}
	return res, err
}

func (s *faultyStore) Complete(ctx context.Context, c idemstore.Completion) error {
	s.completes.Add(1)
	if s.failComplete.Load() || s.failCompletes.Add(-1) >= 0 {
		return &idemstore.Error{Op: "complete", Err: errInjected}
	}
	if s.tooLarge.Load() && !c.Response.NotKept {
		return &idemstore.Error{Op: "complete", Permanent: true, Err: fmt.Errorf("%w: injected", idemstore.ErrTooLarge)}
	}
	return s.inner.Complete(ctx, c)
}

func (s *faultyStore) Release(ctx context.Context, r idemstore.Ref) error {
	s.releases.Add(1)
	if s.failRelease.Load() {
		return &idemstore.Error{Op: "release", Err: errInjected}
	}
	return s.inner.Release(ctx, r)
}

// Get, List and Delete forward the idemstore.Admin capability of the
// inner Store, uncounted; without one, there is no record to find.
func (s *faultyStore) Get(ctx context.Context, userID, key string) (idemstore.Record, bool, error) {
	if a, ok := s.inner.(idemstore.Admin); ok {
		return a.Get(ctx, userID, key)
	}
	return idemstore.Record{}, false, nil
}

func (s *faultyStore) List(ctx context.Context, q idemstore.ListQuery) ([]idemstore.Record, error) {
	if a, ok := s.inner.(idemstore.Admin); ok {
		return a.List(ctx, q)
	}
	return nil, nil
}

func (s *faultyStore) Delete(ctx context.Context, userID, key string) (bool, error) {
	if a, ok := s.inner.(idemstore.Admin); ok {
		return a.Delete(ctx, userID, key)
	}
	return false, nil
}

func (s *faultyStore) Renew(ctx context.Context, r idemstore.Renewal) error {
	s.renews.Add(1)
	if s.failRenew.Load() {
		return &idemstore.Error{Op: "renew", Err: errInjected}
	}
	if s.lostRenew.Load() {
		return idemstore.ErrLeaseLost // as after another invocation's takeover
	}
	if s.refuseRenew.Load() {
		return &idemstore.Error{Op: "renew", Err: errInjected, Permanent: true}
	}
	return s.inner.Renew(ctx, r)
}

func (s *faultyStore) calls() int {
	return int(s.claims.Load() + s.completes.Load() + s.releases.Load() + s.renews.Load())
}

// fakeClock is a settable clock. It starts two hours before the real time,
// truncated to the millisecond. The cases move it forward by at most a little
// over an hour. Stores decide takeover and expiry against the earlier of the
// caller's clock and their server's. So the injected clock drives every branch
// as long as it stays behind the real time.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now().Add(-2 * time.Hour).UTC().Truncate(time.Millisecond)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// jsonLines returns each JSON line written to b so far, decoded.
func jsonLines(t *testing.T, b *logBuffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for line := range strings.SplitSeq(strings.TrimSpace(b.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q is not JSON", line)
		out = append(out, m)
	}
	return out
}

// request describes a test request independently of the payload version.
type request struct {
	method string
	path   string
	query  string // raw query string, e.g. "b=2&a=1"
	// headers go into "headers" as given (names keep their case).
	headers map[string]string
	// multi goes into v1 "multiValueHeaders"; an HTTP API has none, so for
	// v2 each list is joined with "," into "headers", as API Gateway does.
	multi  map[string][]string
	body   string
	b64    bool
	sub    string // authorizer subject; "" means no authorizer at all
	lambda map[string]any
	// params are the route's path parameters (v1 and v2 only).
	params map[string]string
	// arn is the IAM caller's ARN of a Function URL request (its UserID is
	// sub); "" is an IAM user of the account.
	arn string
}

// payload runs a request through a wrapped handler of one payload version.
type payload struct {
	name string
	// wrap wraps h (written against the normalised view) as a handler of
	// this version and returns a function that invokes it.
	wrap func(t *testing.T, h handler, cfg idempotency.Config) invoker
	// skip names the cases that have no form in this payload.
	skip map[string]bool
}

type handler func(ctx context.Context, req idempotency.Request) (apigw.Response, error)

type invoker func(ctx context.Context, r request) (apigw.Response, error)

var payloads = []payload{
	{name: "v2", wrap: wrapVersion[events.APIGatewayV2HTTPRequest, events.APIGatewayV2HTTPResponse](v2Event)},
	{name: "v1", wrap: wrapVersion[events.APIGatewayProxyRequest, events.APIGatewayProxyResponse](v1Event)},
	{name: "function-url", wrap: wrapShape[events.LambdaFunctionURLRequest, events.LambdaFunctionURLResponse](functionURLEvent, functionURLClaims), skip: noLambdaAuthorizer},
	{name: "alb", wrap: wrapShape[events.ALBTargetGroupRequest, events.ALBTargetGroupResponse](albEvent, albClaims), skip: noLambdaAuthorizer},
	middlewarePayload("net/http", ServeMux),
}

func wrapVersion[Req idempotency.AnyRequest, Resp apigw.AnyResponse](event func(request) Req) func(*testing.T, handler, idempotency.Config) invoker {
	return func(t *testing.T, h handler, cfg idempotency.Config) invoker {
		typed := func(ctx context.Context, req Req) (Resp, error) {
			resp, err := h(ctx, idempotency.RequestFrom(req))
			return apigw.ToResponse[Resp](resp), err
		}
		wrapped, err := idempotency.Wrap(typed, cfg)
		require.NoError(t, err)
		return func(ctx context.Context, r request) (apigw.Response, error) {
			resp, err := wrapped(ctx, event(r))
			return apigw.FromResponse(resp), err
		}
	}
}

func v2Event(r request) events.APIGatewayV2HTTPRequest {
	headers := map[string]string{}
	for name, v := range r.headers {
		headers[name] = v
	}
	for name, vs := range r.multi {
		headers[strings.ToLower(name)] = strings.Join(vs, ",")
	}
	e := events.APIGatewayV2HTTPRequest{
		Version:         "2.0",
		RouteKey:        r.method + " " + r.path,
		RawPath:         r.path,
		RawQueryString:  r.query,
		Headers:         headers,
		Body:            r.body,
		IsBase64Encoded: r.b64,
		PathParameters:  r.params,
	}
	e.RequestContext.HTTP.Method = r.method
	e.RequestContext.HTTP.Path = r.path
	e.RequestContext.RequestID = uuid.NewString()
	if r.sub != "" || r.lambda != nil {
		e.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{Lambda: r.lambda}
		if r.sub != "" {
			e.RequestContext.Authorizer.JWT = &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
				Claims: map[string]string{"sub": r.sub, "email": "someone@example.com"},
			}
		}
	}
	return e
}

// v1Event is the request as a REST API delivers it: every header in both
// "headers" (its last value) and "multiValueHeaders" (all of them).
func v1Event(r request) events.APIGatewayProxyRequest {
	multi := map[string][]string{}
	for name, vs := range r.multi {
		multi[name] = append([]string(nil), vs...)
	}
	for name, v := range r.headers {
		found := false
		for m := range multi {
			found = found || strings.EqualFold(m, name)
		}
		if !found {
			multi[name] = []string{v}
		}
	}
	e := events.APIGatewayProxyRequest{
		Resource:          r.path,
		Path:              r.path,
		HTTPMethod:        r.method,
		Headers:           r.headers,
		MultiValueHeaders: multi,
		Body:              r.body,
		IsBase64Encoded:   r.b64,
		PathParameters:    r.params,
	}
	if r.query != "" {
		q, err := url.ParseQuery(r.query)
		if err != nil {
			panic(err)
		}
		e.MultiValueQueryStringParameters = q
		e.QueryStringParameters = map[string]string{}
		for name, vs := range q {
			e.QueryStringParameters[name] = vs[len(vs)-1]
		}
	}
	e.RequestContext.RequestID = uuid.NewString()
	if r.sub != "" || r.lambda != nil {
		e.RequestContext.Authorizer = map[string]any{}
		for k, v := range r.lambda {
			e.RequestContext.Authorizer[k] = v
		}
		if r.sub != "" {
			e.RequestContext.Authorizer["claims"] = map[string]any{"sub": r.sub, "email": "someone@example.com"}
		}
	}
	return e
}
