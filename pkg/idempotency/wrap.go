package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/apigw"
	"github.com/ichido/ichido/pkg/problem"
)

// claimRecoveryTimeout bounds the release that follows a failed claim
// (recoverClaim). It runs detached from the invocation's cancellation, since
// a claim that timed out may well have committed; the client is waiting for
// its 503 meanwhile, so the bound is short.
const claimRecoveryTimeout = 2 * time.Second

// Pauses between the attempts of a Complete or Release that failed
// (finish): from the first pause, doubling up to the longest.
const (
	firstRetryPause   = 50 * time.Millisecond
	longestRetryPause = time.Second
)

// Wrap returns a handler that behaves like h and makes its protected
// requests idempotent (see the package documentation for the whole
// contract). Req is events.APIGatewayV2HTTPRequest or
// events.APIGatewayProxyRequest, Resp events.APIGatewayV2HTTPResponse or
// events.APIGatewayProxyResponse.
//
// Wrap returns an error, and no handler, when h is nil or cfg is invalid;
// the message names the field to fix.
func Wrap[Req apigw.AnyRequest, Resp apigw.AnyResponse](h func(context.Context, Req) (Resp, error), cfg Config) (func(context.Context, Req) (Resp, error), error) {
	if h == nil {
		return nil, errors.New("idempotency: Wrap needs a handler, got nil")
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	d := &decorator{
		cfg:           cfg,
		replayHeaders: cfg.replayHeaderNames(),
		metrics:       &metricsWriter{w: cfg.Metrics, namespace: cfg.Namespace},
	}
	return func(ctx context.Context, req Req) (Resp, error) {
		view := apigw.FromRequest(req)
		if !slices.Contains(d.cfg.Methods, view.Method) {
			return h(ctx, req)
		}
		return serve(ctx, d, h, req, view)
	}, nil
}

type decorator struct {
	cfg           Config
	replayHeaders []string
	metrics       *metricsWriter
}

// serve runs the contract's flow for one protected request.
func serve[Req apigw.AnyRequest, Resp apigw.AnyResponse](ctx context.Context, d *decorator, h func(context.Context, Req) (Resp, error), req Req, view apigw.Request) (Resp, error) {
	obs := &observation{start: d.cfg.Clock(), method: view.Method, path: view.Path}
	defer func() { obs.emit(ctx, d.cfg.Logger, d.metrics) }()

	refuse := func(outcome Outcome, p problem.Details) (Resp, error) {
		obs.outcome, obs.status, obs.reason = outcome, p.Status, p.Code
		r := apigw.Problem(p)
		if p.Status == http.StatusConflict || p.Status == http.StatusServiceUnavailable {
			r.Headers.Set("Retry-After", "1")
		}
		return apigw.ToResponse[Resp](r), nil
	}

	userID, detail, err := d.userID(ctx, view)
	if userID == "" {
		obs.err = err
		return refuse(OutcomeRejected, problem.New(http.StatusUnauthorized, problem.CodeUnauthenticated, detail))
	}
	obs.user = userID

	key, err := parseKey(view.Header(HeaderName))
	switch {
	case errors.Is(err, errKeyMissing):
		return refuse(OutcomeRejected, problem.New(http.StatusBadRequest, problem.CodeKeyMissing,
			"Send an Idempotency-Key header holding a new UUID version 4 with every "+view.Method+" request."))
	case err != nil:
		return refuse(OutcomeRejected, problem.New(http.StatusBadRequest, problem.CodeKeyInvalid,
			"The Idempotency-Key header must hold exactly one UUID version 4, bare or as a quoted string."))
	}
	obs.key = key

	if p, ok := d.checkBodySize(view); !ok {
		return refuse(OutcomeTooLarge, p)
	}
	hash, err := Fingerprint(view)
	if err != nil {
		return refuse(OutcomeRejected, problem.New(http.StatusBadRequest, problem.CodeValidation,
			"The request body is marked base64-encoded but is not valid base64."))
	}

	ref := Ref{UserID: userID, Key: key, Owner: d.cfg.Owner(ctx)}
	obs.owner = ref.Owner
	now := d.cfg.Clock()
	claim := Claim{
		Ref:         ref,
		RequestHash: hash,
		Now:         now,
		LeaseUntil:  leaseUntil(ctx, now, d.cfg.LeaseMargin, d.cfg.MaxLease),
		ExpiresAt:   now.Add(d.cfg.TTL),
	}
	res, err := d.claim(ctx, claim, obs)
	if err != nil {
		obs.err = err
		return refuse(OutcomeStoreError, storeUnavailable())
	}

	if !res.Claimed {
		rec := res.Record
		switch {
		case rec.RequestHash != hash:
			return refuse(OutcomeMismatch, problem.New(http.StatusUnprocessableEntity, problem.CodeKeyReused,
				"This Idempotency-Key was already used for a different request (method, path, query or body). Use a new key for a new request."))
		case rec.Status == StatusInProgress:
			return refuse(OutcomeInProgress, problem.New(http.StatusConflict, problem.CodeKeyInUse,
				"A request with this Idempotency-Key is still being processed. Retry after the delay in Retry-After."))
		case rec.Status == StatusCompleted && rec.Response != nil:
			obs.outcome, obs.status = OutcomeReplayed, rec.Response.StatusCode
			return apigw.ToResponse[Resp](d.replay(*rec.Response)), nil
		default:
			obs.err = fmt.Errorf("store returned an unusable record: status %q, response present %t", rec.Status, rec.Response != nil)
			return refuse(OutcomeStoreError, storeUnavailable())
		}
	}

	obs.claimed = true
	ctx = NewContext(ctx, Info{Key: key, UserID: userID, RequestHash: hash})
	state := &atomicRun{d: d, ref: ref}
	ctx = context.WithValue(ctx, atomicKey{}, state)
	return run(ctx, d, h, req, state, obs)
}

// run calls the handler on a claimed record, then completes or releases it.
func run[Req apigw.AnyRequest, Resp apigw.AnyResponse](ctx context.Context, d *decorator, h func(context.Context, Req) (Resp, error), req Req, state *atomicRun, obs *observation) (resp Resp, err error) {
	ref := state.ref
	start := time.Now()
	returned := false
	defer func() {
		if returned {
			return
		}
		// The handler panicked (or called runtime.Goexit): free the key for
		// the retry, then let the panic go on.
		v := recover()
		obs.handler, obs.handlerMS = "panic", msSince(start)
		d.release(ctx, ref, obs)
		if v != nil {
			panic(v)
		}
	}()
	resp, err = h(ctx, req)
	returned = true
	obs.handlerMS = msSince(start)

	if err != nil {
		obs.handler = "error"
		obs.err = err
		d.release(ctx, ref, obs)
		return resp, err
	}
	obs.handler = "ok"
	view := apigw.FromResponse(resp)
	obs.status = view.StatusCode
	if !Storable(view.StatusCode) || state.doNotStore.Load() {
		d.release(ctx, ref, obs)
		return resp, nil
	}
	if state.takenOver.Load() {
		// The handler completed the record in its own transaction.
		obs.outcome = OutcomeCompleted
		return resp, nil
	}
	d.complete(ctx, ref, view, obs)
	return resp, nil
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

// checkBodySize refuses a body larger than Config.MaxBodyBytes, before it is
// fingerprinted or anything is stored.
func (d *decorator) checkBodySize(view apigw.Request) (problem.Details, bool) {
	if len(view.Body) <= d.cfg.MaxBodyBytes {
		return problem.Details{}, true
	}
	return problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge,
		fmt.Sprintf("The request body is larger than the %d bytes this endpoint accepts.", d.cfg.MaxBodyBytes)), false
}

// claim claims the record, and recovers from a claim whose reply was lost
// (recoverClaim).
func (d *decorator) claim(ctx context.Context, c Claim, obs *observation) (ClaimResult, error) {
	var res ClaimResult
	err := obs.timed("claim", func() (err error) {
		res, err = d.cfg.Store.Claim(ctx, c)
		return err
	})
	if err == nil {
		return res, nil
	}
	return d.recoverClaim(ctx, c, err, obs)
}

// recoverClaim handles a failed claim. A claim can commit and still fail on
// its way back (a timeout, a reset connection); left alone, that record
// would lock the key for the whole lease although no handler ever ran, and
// every retry would get 409. So the claim is tried once more with the same
// owner token, which the Store counts as claimed when the first attempt had
// committed; if that fails too, the record is released with the same token.
// Both are safe: the handler has not run, and the owner token fences off any
// record another invocation holds. The release runs even after the
// invocation's context is done, bounded by claimRecoveryTimeout.
func (d *decorator) recoverClaim(ctx context.Context, c Claim, first error, obs *observation) (ClaimResult, error) {
	if ctx.Err() == nil {
		var res ClaimResult
		err := obs.timed("claim", func() (err error) {
			res, err = d.cfg.Store.Claim(ctx, c)
			return err
		})
		if err == nil {
			obs.err = fmt.Errorf("claim recovered after a failed attempt: %w", first)
			return res, nil
		}
		first = errors.Join(first, err)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimRecoveryTimeout)
	defer cancel()
	err := obs.timed("release", func() error { return d.cfg.Store.Release(rctx, c.Ref) })
	switch {
	case err == nil:
		return ClaimResult{}, fmt.Errorf("%w (the claim had committed and was released)", first)
	case errors.Is(err, ErrLeaseLost):
		return ClaimResult{}, first // nothing of ours was stored
	default:
		return ClaimResult{}, errors.Join(first, fmt.Errorf("release after the failed claim: %w", err))
	}
}

// complete stores the response. On ErrLeaseLost nothing is stored (another
// invocation owns the key now). A failing store is retried within
// Config.FinishTimeout (finish); when it keeps failing, the record is left
// in progress until its lease runs out rather than released, since the
// work is done and a release would invite an immediate second run.
func (d *decorator) complete(ctx context.Context, ref Ref, resp apigw.Response, obs *observation) {
	stored := d.stored(resp)
	err := d.finish(ctx, "complete", obs, func(ctx context.Context) error {
		now := d.cfg.Clock()
		return d.cfg.Store.Complete(ctx, Completion{Ref: ref, Response: stored, Now: now, ExpiresAt: now.Add(d.cfg.TTL)})
	})
	obs.outcome = finishOutcome(err, OutcomeCompleted)
	if err != nil {
		obs.err = errors.Join(obs.err, err)
	}
}

// release deletes the claimed record so that the client's retry runs again,
// retried like complete.
func (d *decorator) release(ctx context.Context, ref Ref, obs *observation) {
	err := d.finish(ctx, "release", obs, func(ctx context.Context) error { return d.cfg.Store.Release(ctx, ref) })
	obs.outcome = finishOutcome(err, OutcomeReleased)
	if err != nil {
		obs.err = errors.Join(obs.err, err)
	}
}

// finish makes a Complete or Release call until it succeeds, returns
// ErrLeaseLost, or Config.FinishTimeout has passed, pausing longer after
// each failure. It runs detached from the invocation's cancellation: the
// work is done and must be recorded even if the client went away. A call
// whose reply was lost after it committed is answered ErrLeaseLost when
// repeated (the record is no longer in progress), which is logged as such.
func (d *decorator) finish(ctx context.Context, op string, obs *observation, call func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.FinishTimeout)
	defer cancel()
	pause := firstRetryPause
	for attempt := 1; ; attempt++ {
		err := obs.timed(op, func() error { return call(ctx) })
		if errors.Is(err, ErrLeaseLost) && attempt > 1 {
			return fmt.Errorf("%w (after a failed attempt, which may have committed)", err)
		}
		if err == nil || errors.Is(err, ErrLeaseLost) {
			return err
		}
		deadline, _ := ctx.Deadline()
		if time.Until(deadline) <= pause {
			return err
		}
		timer := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			timer.Stop()
			return err
		case <-timer.C:
		}
		pause = min(2*pause, longestRetryPause)
	}
}

func finishOutcome(err error, ok Outcome) Outcome {
	switch {
	case err == nil:
		return ok
	case errors.Is(err, ErrLeaseLost):
		return OutcomeLeaseLost
	default:
		return OutcomeStoreError
	}
}

// cookieSeparator joins the Set-Cookie values of a stored response. A header
// value never holds a line break, and cookies cannot be joined with ", "
// (an Expires attribute holds a comma), so the values split back exactly.
const cookieSeparator = "\n"

// stored keeps the parts of resp that a replay gives back. Several values
// of one header are joined with ", ", except Set-Cookie's (cookieSeparator).
func (d *decorator) stored(resp apigw.Response) StoredResponse {
	s := StoredResponse{StatusCode: resp.StatusCode, Body: resp.Body, IsBase64Encoded: resp.IsBase64Encoded}
	for _, name := range d.replayHeaders {
		if values := resp.Headers.Values(name); len(values) > 0 {
			if s.Headers == nil {
				s.Headers = map[string]string{}
			}
			sep := ", "
			if name == "Set-Cookie" {
				sep = cookieSeparator
			}
			s.Headers[name] = strings.Join(values, sep)
		}
	}
	return s
}

// replay rebuilds a stored response, marked as replayed; every stored
// cookie is a Set-Cookie value of its own.
func (d *decorator) replay(s StoredResponse) apigw.Response {
	h := http.Header{}
	for name, value := range s.Headers {
		if http.CanonicalHeaderKey(name) == "Set-Cookie" {
			for cookie := range strings.SplitSeq(value, cookieSeparator) {
				h.Add(name, cookie)
			}
			continue
		}
		h.Set(name, value)
	}
	h.Set(ReplayedHeader, "true")
	return apigw.Response{StatusCode: s.StatusCode, Headers: h, Body: s.Body, IsBase64Encoded: s.IsBase64Encoded}
}

// userID returns the authenticated user as a lower-case UUID, or the
// detail of a 401 for the client and, when the extractor failed, its error
// for the log.
func (d *decorator) userID(ctx context.Context, view apigw.Request) (userID, detail string, err error) {
	sub, err := d.cfg.UserID(ctx, view)
	switch {
	case err != nil || sub == "":
		return "", "The request carries no authenticated user.", err
	case !isUUID(sub):
		return "", "The authenticated subject is not a UUID, so it cannot own idempotency keys.", nil
	}
	return strings.ToLower(sub), "", nil
}

func storeUnavailable() problem.Details {
	return problem.New(http.StatusServiceUnavailable, problem.CodeStoreUnavailable,
		"The request was not processed because the idempotency store is unavailable. Retry after the delay in Retry-After.")
}

func msSince(t time.Time) float64 { return float64(time.Since(t).Microseconds()) / 1000 }
