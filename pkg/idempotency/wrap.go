package idempotency

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// Wrap returns a handler that behaves like h and makes its protected
// requests idempotent. Req and Resp are the request and response of an
// HTTP API, a REST API, a Function URL or an ALB target (AnyRequest). When
// h ran, its own response (or error) is returned unchanged; otherwise the
// refusal or the replay is built in Resp's shape. Wrap returns an error,
// and no handler, when h is nil or cfg is invalid; the message names the
// field to fix.
func Wrap[Req AnyRequest, Resp AnyResponse](h func(context.Context, Req) (Resp, error), cfg Config) (func(context.Context, Req) (Resp, error), error) {
	if h == nil {
		return nil, errors.New("idempotency: Wrap needs a handler, got nil")
	}
	d, err := newDecorator(cfg)
	if err != nil {
		return nil, err
	}
	d.flat = true
	return func(ctx context.Context, req Req) (Resp, error) {
		view := RequestFrom(req)
		if !d.protects(view.Method) {
			return h(ctx, req)
		}
		var resp Resp
		answer, own, err := d.serve(ctx, view, bodyBytes(view), func(ctx context.Context) (apigw.Response, error) {
			var err error
			resp, err = h(ctx, req)
			return apigw.FromResponse(resp), err
		})
		if own {
			// The handler ran: its own response (or error) goes back as it is.
			return resp, err
		}
		return apigw.ToResponse[Resp](answer), nil
	}, nil
}

// decorator is the HTTP contract over the
// engine, shared by Wrap and Middleware.
type decorator struct {
	cfg           Config
	replayHeaders []string
	e             *engine
	// defaultFingerprint: Config.Fingerprint was left to Fingerprint, whose
	// inputs rawDigestOf covers.
	defaultFingerprint bool
	// rawBodies: the decorator is Middleware's. It keeps a response body
	// as its bytes, never base64, and hands a replay that no hook reads
	// back as the stored response, which writeResponse writes straight
	// into the writer's headers.
	rawBodies bool
	// flat: Wrap answers in an events payload, so a replay that no hook
	// reads is built straight into its shape (flatReplay).
	flat bool
}

func newDecorator(cfg Config) (*decorator, error) {
	defaultFingerprint := cfg.Fingerprint == nil
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &decorator{cfg: cfg, replayHeaders: cfg.replayHeaderNames(), e: newEngine(cfg), defaultFingerprint: defaultFingerprint}, nil
}

// protects reports whether requests with method go through the flow.
func (d *decorator) protects(method string) bool {
	return slices.Contains(d.cfg.Methods, method)
}

// serve runs the contract's flow for one protected request, whose body is
// bodySize bytes long as the shape counts it (Config.MaxBodyBytes). When
// the handler ran (own is true) the caller answers with the handler's own
// response and err, which run returned; otherwise answer is the refusal or
// the replay to send.
func (d *decorator) serve(ctx context.Context, view Request, bodySize int, run func(ctx context.Context) (apigw.Response, error)) (answer apigw.Response, own bool, err error) {
	obs := &observation{start: d.cfg.Clock(), method: view.Method, path: view.Path}
	ctx = d.e.startSpan(ctx, obs, observe.Call{Shape: observe.ShapeHTTP, Method: view.Method})
	defer func() { obs.emit(ctx, d.cfg.Logger, d.e.metrics) }()

	refuse := func(outcome Outcome, p problem.Details) (apigw.Response, bool, error) {
		obs.outcome, obs.status, obs.reason = outcome, p.Status, p.Code
		r := apigw.Problem(p)
		if p.Status == http.StatusConflict || p.Status == http.StatusServiceUnavailable {
			r.Headers.Set("Retry-After", "1")
		}
		return r, false, nil
	}

	userID, detail, err := d.userID(ctx, view)
	if userID == "" {
		obs.err = err
		return refuse(OutcomeRejected, problem.New(http.StatusUnauthorized, CodeUnauthenticated, detail))
	}
	tenant := d.cfg.Tenant(ctx)
	if tenant == "" && d.cfg.RequireTenant {
		obs.err = ErrNoTenant
		return refuse(OutcomeRejected, problem.New(http.StatusUnauthorized, CodeUnauthenticated, "The request carries no tenant, and this service requires one."))
	}
	recordUser := TenantUserID(tenant, userID)
	obs.user, obs.tenant = recordUser, tenant

	key, err := d.requestKey(ctx, view)
	switch {
	case errors.Is(err, errKeyMissing) && d.cfg.AllowMissingKey:
		return d.unprotected(ctx, obs, run)
	case err != nil:
		obs.err = err
		return refuse(OutcomeRejected, d.keyProblem(view, err))
	}
	obs.key = key

	if p, ok := d.checkBodySize(bodySize); !ok {
		return refuse(OutcomeTooLarge, p)
	}
	recordKey := RecordKey(d.cfg.KeyPrefix, d.cfg.KeyFormat, key)
	hash, err := d.fingerprint(view, recordUser, recordKey, obs)
	if err != nil {
		obs.err = err
		return refuse(OutcomeRejected, fingerprintProblem(err))
	}

	ref, res, err := d.e.claim(ctx, obs, recordUser, recordKey, hash)
	switch {
	case errors.Is(err, ErrShuttingDown):
		return refuse(OutcomeRejected, problem.New(http.StatusServiceUnavailable, CodeStoreUnavailable,
			"The request was not processed because this instance is shutting down. Retry after the delay in Retry-After."))
	case idemstore.IsPermanent(err):
		return refuse(OutcomeStoreError, storeMisconfigured())
	case err != nil:
		return refuse(OutcomeStoreError, storeUnavailable())
	}

	if !res.Claimed {
		rec := res.Record
		switch {
		case rec.Fingerprint != hash:
			return refuse(OutcomeMismatch, problem.New(http.StatusUnprocessableEntity, CodeKeyReused,
				"This Idempotency-Key was already used for a different request (method, path, query or body). Use a new key for a new request."))
		case rec.Status == idemstore.StatusInProgress:
			return refuse(OutcomeInProgress, problem.New(http.StatusConflict, CodeKeyInUse,
				"A request with this Idempotency-Key is still being processed. Retry after the delay in Retry-After."))
		case rec.Status == idemstore.StatusCompleted && rec.Response != nil && rec.Response.NotKept:
			return refuse(OutcomeReplayed, problem.New(http.StatusUnprocessableEntity, CodeResponseNotKept,
				"The request with this Idempotency-Key was processed, but its response was too large to be kept for replay. It will not be processed again; use a new key for a new request."))
		case rec.Status == idemstore.StatusCompleted && rec.Response != nil:
			obs.outcome, obs.status = OutcomeReplayed, rec.Response.StatusCode
			if d.cfg.OnReplay == nil {
				switch {
				case d.flat:
					return d.flatReplay(*rec.Response), false, nil
				case d.rawBodies:
					// Middleware writes it into its writer's headers.
					return apigw.Response{Stored: rec.Response}, false, nil
				}
			}
			answer := d.replay(*rec.Response)
			if d.cfg.OnReplay != nil {
				rec.UserID, rec.Key = ref.UserID, ref.Key
				d.onReplay(ctx, obs, key, rec, answer.Headers)
			}
			return answer, false, nil
		default:
			obs.err = fmt.Errorf("store returned an unusable record: status %q, response present %t", rec.Status, rec.Response != nil)
			return refuse(OutcomeStoreError, storeUnavailable())
		}
	}

	ctx = NewContext(ctx, Info{Key: key, UserID: userID, Tenant: tenant, Fingerprint: hash})
	state := &runState{e: d.e, ref: ref, stored: d.stored}
	mismatch := false
	err = d.e.execute(ctx, state, obs, func(ctx context.Context) (idemstore.Response, bool, error) {
		resp, err := run(ctx)
		if err != nil {
			return idemstore.Response{}, false, err
		}
		obs.status = resp.StatusCode
		if !Storable(resp.StatusCode) {
			return idemstore.Response{}, false, nil
		}
		kept := d.stored(resp)
		if state.completionTaken.Load() && !sameResponse(kept, state.takenResponse) {
			mismatch = true
		}
		return kept, true, nil
	})
	if mismatch && err == nil {
		// The handler completed the record with one response and answered
		// with another: the client must not get what its retry would not.
		obs.err = errors.Join(obs.err, errors.New("the handler answered with another response than the one it completed in its transaction; the answer is refused, the completed one replays"))
		return refuse(OutcomeCompleted, problem.New(http.StatusInternalServerError, CodeResponseMismatch,
			"The request was processed, but its response could not be confirmed. Retry with the same Idempotency-Key to get it."))
	}
	return apigw.Response{}, true, err
}

// fingerprint returns the request's fingerprint (Config.Fingerprint). With
// the default Fingerprint and a local cache, a repeat of the very request
// whose record is cached (the same method, path, query and body bytes)
// takes it from the cache: no second canonicalisation of the body.
func (d *decorator) fingerprint(view Request, userID, recordKey string, obs *observation) (string, error) {
	if d.defaultFingerprint && d.e.cache != nil {
		obs.raw = rawDigestOf(view)
		if hash, ok := d.e.cache.HashOf(userID, recordKey, obs.raw); ok {
			return hash, nil
		}
	}
	return d.cfg.Fingerprint(view)
}

// sameResponse reports whether two kept responses replay alike.
func sameResponse(a, b idemstore.Response) bool {
	return a.StatusCode == b.StatusCode && a.Body == b.Body && a.IsBase64Encoded == b.IsBase64Encoded &&
		a.NotKept == b.NotKept && maps.Equal(a.Headers, b.Headers)
}

// Storable reports whether a response with this status is stored for
// replay: 2xx, 3xx and 4xx except 408, 409, 425 and 429, which are
// transient. Anything else (5xx, or a status outside 200–499) releases the
// key so that a retry runs the handler again.
func Storable(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusConflict, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status >= 200 && status < 500
}

// bodyBytes is the size in bytes of a request's body as its handler reads
// it: a base64 body counts as the bytes it decodes to, so that
// Config.MaxBodyBytes means the same on every shape.
func bodyBytes(view Request) int {
	n := len(view.Body)
	if !view.IsBase64Encoded {
		return n
	}
	pad := 0
	for pad < 2 && pad < n && view.Body[n-1-pad] == '=' {
		pad++
	}
	return (n - pad) * 6 / 8
}

// checkBodySize refuses a body larger than Config.MaxBodyBytes, before it is
// fingerprinted or anything is stored.
func (d *decorator) checkBodySize(size int) (problem.Details, bool) {
	if size <= d.cfg.MaxBodyBytes {
		return problem.Details{}, true
	}
	return problem.New(http.StatusRequestEntityTooLarge, CodePayloadTooLarge,
		fmt.Sprintf("The request body is larger than the %d bytes this endpoint accepts.", d.cfg.MaxBodyBytes)), false
}

func finishOutcome(err error, ok Outcome) Outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, idemstore.ErrLeaseLost):
		return OutcomeLeaseLost
	default:
		return OutcomeStoreError
	}
}

// encodeCookies keeps a response's cookies as a JSON array of strings,
// which splits back into exactly those values whatever bytes they hold.
// Cookies cannot be joined with ", " (an Expires attribute holds a comma).
func encodeCookies(cookies []string) string {
	b, _ := json.Marshal(cookies) // a []string always marshals
	return string(b)
}

// decodeCookies splits a stored Set-Cookie value (encodeCookies) back into
// its cookies; a value that is no such array is one cookie.
func decodeCookies(value string) []string {
	var cookies []string
	if err := json.Unmarshal([]byte(value), &cookies); err == nil {
		return cookies
	}
	return []string{value}
}

// stored keeps the parts of resp that a replay gives back. Several values
// of one header are joined with ", ", except Set-Cookie's (encodeCookies).
func (d *decorator) stored(resp apigw.Response) idemstore.Response {
	s := idemstore.Response{StatusCode: resp.StatusCode, Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded}
	if d.rawBodies && s.IsBase64Encoded {
		// An events response given to a store's completion in the
		// handler's transaction by a net/http handler is kept as
		// Middleware keeps its own: bytes.
		if b, err := base64.StdEncoding.DecodeString(s.Body); err == nil {
			s.Body, s.IsBase64Encoded = string(b), false
		}
	}
	for _, name := range d.replayHeaders {
		if values := resp.Headers.Values(name); len(values) > 0 {
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			if name == "Set-Cookie" {
				s.Headers[name] = encodeCookies(values)
				continue
			}
			s.Headers[name] = strings.Join(values, ", ")
		}
	}
	return s
}

// replay rebuilds a stored response, marked as replayed; every stored
// cookie is a Set-Cookie value of its own.
func (d *decorator) replay(s idemstore.Response) apigw.Response {
	h := make(http.Header, len(s.Headers)+1)
	replayHeaders(h, s)
	return apigw.Response{StatusCode: s.StatusCode, Headers: h, Body: s.Body, IsBase64Encoded: s.IsBase64Encoded}
}

// replayHeaders sets s's headers, and Idempotent-Replayed, in h under
// canonical names, replacing any value h had under them.
func replayHeaders(h http.Header, s idemstore.Response) {
	// One array holds the single values, as in addHeaders.
	values := make([]string, 0, len(s.Headers)+1)
	var cookies []string
	for name, value := range s.Headers {
		name = http.CanonicalHeaderKey(name)
		if name == "Set-Cookie" {
			cookies = append(cookies, decodeCookies(value)...)
			continue
		}
		values = append(values, value)
		n := len(values)
		h[name] = values[n-1 : n : n]
	}
	if cookies != nil {
		h["Set-Cookie"] = cookies
	}
	values = append(values, "true")
	n := len(values)
	h[ReplayedHeader] = values[n-1 : n : n]
}

// flatReplay is replay built for an events payload: the headers one value
// each and the cookies apart, as ToResponse would make them of replay's
// answer, with no http.Header between.
func (d *decorator) flatReplay(s idemstore.Response) apigw.Response {
	h := make(map[string]string, len(s.Headers)+1)
	var cookies []string
	for name, value := range s.Headers {
		name = http.CanonicalHeaderKey(name)
		if name == "Set-Cookie" {
			cookies = append(cookies, decodeCookies(value)...)
			continue
		}
		h[name] = value
	}
	h[ReplayedHeader] = "true"
	return apigw.Response{StatusCode: s.StatusCode, Flat: h, Cookies: cookies, Body: s.Body, IsBase64Encoded: s.IsBase64Encoded}
}

// userID returns the authenticated user as a lower-case UUID (SubjectUUID
// of the subject), or the
// detail of a 401 for the client and, when the extractor failed, its error
// for the log.
func (d *decorator) userID(ctx context.Context, view Request) (userID, detail string, err error) {
	sub, err := d.cfg.Subject(ctx, view)
	if err != nil || sub == "" {
		return "", "The request carries no authenticated user.", err
	}
	return SubjectUUID(sub), "", nil
}

// storeMisconfigured is the answer to a claim the store refused for good:
// 500 without Retry-After, since retrying cannot help until the deployment
// is fixed.
func storeMisconfigured() problem.Details {
	return problem.New(http.StatusInternalServerError, CodeStoreMisconfigured,
		"The request was not processed because the idempotency store refuses this service's requests. Retrying will not help until the service is fixed.")
}

func storeUnavailable() problem.Details {
	return problem.New(http.StatusServiceUnavailable, CodeStoreUnavailable,
		"The request was not processed because the idempotency store is unavailable. Retry after the delay in Retry-After.")
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
