package idempotency

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/emf"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// Outcome is what became of a protected request. It is the log line's "outcome"
// field and the name of the request's metric.
type Outcome string

// Outcomes.
const (
	// OutcomeCompleted: the handler ran and its response was stored.
	OutcomeCompleted Outcome = "completed"
	// OutcomeReleased: the handler ran, failed (error, panic, 5xx or a
	// transient 4xx) and its record was deleted so that a retry runs again.
	OutcomeReleased Outcome = "released"
	// OutcomeLeaseLost: the handler ran but its lease had been taken over,
	// so nothing was stored or deleted.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeReplayed: a stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeInProgress: refused with 409, the first request still runs.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeMismatch: refused with 422, the key was used for another request.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeStoreError: a store call failed. On claim the request was
	// refused with 503; on complete or release the handler's response was
	// returned and the record is left to its lease.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeNotKept: the handler ran, but its response could not be kept;
	// the record is completed with the not-kept marker.
	OutcomeNotKept Outcome = "not_kept"
	// OutcomeRejected: refused before the store was consulted (400 or 401).
	OutcomeRejected Outcome = "rejected"
	// OutcomeTooLarge: refused with 413 because the body is larger than
	// Config.MaxBodyBytes; the store was not consulted.
	OutcomeTooLarge Outcome = "too_large"
	// OutcomeUnprotected: a run without a key, with AllowMissingKey.
	OutcomeUnprotected Outcome = "unprotected"
)

// metricClaimed counts the requests whose handler ran, whatever followed.
const metricClaimed = "claimed"

// metricStoreRetried counts the requests in which a failed store call was tried
// again, whatever the retry gave. That is a claim whose reply may have been
// lost, or a completion or release that failed.
const metricStoreRetried = "store_retried"

// metricCacheHit counts the requests answered from the local cache
// (Config.LocalCache), with no store call.
const metricCacheHit = "cache_hit"

// metricWaited counts the duplicates that waited for the first run's answer
// (Config.WaitForResult), whatever the wait gave.
const metricWaited = "waited"

// metricStorePermanent counts the requests in which the store failed for
// good (idemstore.Error.Permanent): a deployment to fix, not a blip.
const metricStorePermanent = "store_permanent"

// observation gathers what one protected request did; emit writes it as
// one log line and one EMF line.
type observation struct {
	start     time.Time
	method    string // the HTTP method, or a gRPC or Connect call's ("pkg.Service/Method")
	path      string
	function  string // the name of a Function or SQSHandler
	key       string
	user      string
	tenant    string
	owner     string
	outcome   Outcome
	status    int
	reason    string // problem code of a refusal
	claimed   bool
	handler   string // "ok", "error" or "panic"
	storeMS   []storeCall
	storeBuf  [4]storeCall // storeMS's first calls, with no allocation
	handlerMS float64
	err       error // internal; logged, never sent to a client
	permanent bool  // a store call failed for good (idemstore.Error.Permanent)

	hash      string    // the request's fingerprint, kept with a cached record
	raw       rawDigest // the request's raw digest when it was computed (rawDigestOf)
	cached    bool      // answered from the local cache, no store call
	waited    bool      // a duplicate polled for the first run's answer
	waitedMS  float64   // how long it waited, polls and pauses
	heartbeat bool      // the run renews its lease while it runs
	renewed   bool      // a renewal of the run's lease succeeded
	// leaseFrom is when, on the local monotonic clock, the lease of the
	// last claim sent was measured from (a heartbeat run is told before it
	// could run out).
	leaseFrom time.Time

	drain   *drainRun         // the call as Config.Drain tracks it
	drained *Drain            // the Drain that tracks it
	digest  []byte            // Config.LogDigestSecret: log digests, not values
	span    observe.Span      // the call's span, when Config.Observer is set
	origin  *idemstore.Origin // a replay's: the traced run that produced it
	// recordUser and recordKey are the record's ids, which a store's error
	// may quote (redact).
	recordUser, recordKey string
	// storeAttrs holds the log line's store group.
	storeAttrs [4]slog.Attr
}

// storeCall is the latency of one Store call; a repeated call adds up.
type storeCall struct {
	op    string // "claim", "complete", "release" or "renew"
	ms    float64
	calls int
}

// timed records the latency of one Store call.
func (o *observation) timed(op string, call func() error) error {
	start := time.Now()
	err := call()
	o.record(op, start, err)
	return err
}

// record records a Store call of op that started at start and returned
// err. A caller on a hot path calls it directly, with no closure to
// allocate.
func (o *observation) record(op string, start time.Time, err error) {
	d := time.Since(start)
	if o.span != nil {
		o.span.StoreCall(op, start, d, errorClass(err))
	}
	ms := float64(d.Microseconds()) / 1000
	for i := range o.storeMS {
		if o.storeMS[i].op == op {
			o.storeMS[i].ms += ms
			o.storeMS[i].calls++
			return
		}
	}
	if o.storeMS == nil {
		o.storeMS = o.storeBuf[:0]
	}
	o.storeMS = append(o.storeMS, storeCall{op: op, ms: ms, calls: 1})
}

// storeTime is the time the Store calls of op have taken so far.
func (o *observation) storeTime(op string) time.Duration {
	for _, c := range o.storeMS {
		if c.op == op {
			return time.Duration(c.ms * float64(time.Millisecond))
		}
	}
	return 0
}

// retried reports whether a Store call was made more than once after a
// failure (the renewals of a heartbeat and the polls of a wait are many by
// design).
func (o *observation) retried() bool {
	for _, c := range o.storeMS {
		if c.calls > 1 && c.op != "renew" && c.op != "wait" {
			return true
		}
	}
	return false
}

// identifier is an identifier as the log line shows it: its value, or its
// keyed digest with Config.LogDigestSecret.
func (o *observation) identifier(v string) string {
	if o.digest == nil {
		return v
	}
	return observe.Digest(o.digest, v)
}

// redact returns text with each of the call's identifiers (the key, the
// user, the record's ids, the path) replaced by its digest, when
// Config.LogDigestSecret is set: an error from a store or a handler may
// quote them. An identifier shorter than 4 bytes is left: it names no one.
func (o *observation) redact(text string) string {
	return redact(o.digest, text, o.key, o.user, o.recordUser, o.recordKey, o.path)
}

// redact returns text with each of ids replaced by its digest under
// secret; text itself when secret is nil.
func redact(secret []byte, text string, ids ...string) string {
	if secret == nil {
		return text
	}
	for _, v := range ids {
		if len(v) >= 4 {
			text = strings.ReplaceAll(text, v, observe.Digest(secret, v))
		}
	}
	return text
}

// errorClass is the observe class of a store call's error ("" for nil).
func errorClass(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, idemstore.ErrLeaseLost):
		return observe.ClassLeaseLost
	case idemstore.IsPermanent(err):
		return observe.ClassPermanent
	}
	return observe.ClassTransient
}

// result is the observation as its span's Result.
func (o *observation) result() observe.Result {
	r := observe.Result{
		Outcome: string(o.outcome), Status: o.status,
		Claimed: o.claimed, Replayed: o.outcome == OutcomeReplayed, Cached: o.cached,
		Waited: o.waited, WaitedFor: time.Duration(o.waitedMS * float64(time.Millisecond)),
		Heartbeat: o.renewed, Retried: o.retried(),
	}
	switch {
	case o.permanent:
		r.ErrorClass = observe.ClassPermanent
	case o.outcome == OutcomeLeaseLost:
		r.ErrorClass = observe.ClassLeaseLost
	case o.outcome == OutcomeStoreError:
		r.ErrorClass = observe.ClassTransient
	case o.handler == "error" || o.handler == "panic":
		r.ErrorClass = observe.ClassHandler
	}
	if r.Replayed {
		r.Origin = o.origin
	}
	return r
}

func (o *observation) emit(ctx context.Context, logger *slog.Logger, metrics *emf.Writer) {
	if o.drain != nil {
		defer o.drained.leave(o.drain)
	}
	if o.span != nil {
		o.span.End(o.result())
	}
	level := slog.LevelInfo
	switch o.outcome {
	case OutcomeLeaseLost, OutcomeNotKept:
		level = slog.LevelWarn
	case OutcomeStoreError:
		level = slog.LevelError
	}
	if h := logger.Handler(); h.Enabled(ctx, level) {
		// At most 16 attributes: built on the stack, not grown on the heap.
		var buf [16]slog.Attr
		attrs := append(buf[:0], slog.String("outcome", string(o.outcome)))
		if o.function != "" {
			attrs = append(attrs, slog.String("function", o.function))
			if o.method != "" {
				// A gRPC or Connect call's method.
				attrs = append(attrs, slog.String("method", o.method))
			}
		} else {
			attrs = append(attrs, slog.String("method", o.method))
			if o.digest == nil {
				// A path may hold the key (PathKey) or the user's ids: with
				// digests on, it is left out.
				attrs = append(attrs, slog.String("path", o.path))
			}
		}
		if o.key != "" {
			attrs = append(attrs, slog.String("key", o.identifier(o.key)))
		}
		if o.user != "" {
			attrs = append(attrs, slog.String("user", o.identifier(o.user)))
		}
		if o.tenant != "" {
			attrs = append(attrs, slog.String("tenant", o.tenant))
		}
		if o.owner != "" {
			attrs = append(attrs, slog.String("owner", o.owner))
		}
		if o.status != 0 {
			attrs = append(attrs, slog.Int("status", o.status))
		}
		if o.reason != "" {
			attrs = append(attrs, slog.String("reason", o.reason))
		}
		attrs = append(attrs, slog.Bool("claimed", o.claimed))
		if o.cached {
			attrs = append(attrs, slog.Bool("cached", true))
		}
		if o.renewed {
			attrs = append(attrs, slog.Bool("heartbeat", true))
		}
		if o.waited {
			attrs = append(attrs, slog.Float64("waited_ms", o.waitedMS))
		}
		if o.handler != "" {
			attrs = append(attrs, slog.String("handler", o.handler), slog.Float64("handler_ms", o.handlerMS))
		}
		if len(o.storeMS) > 0 {
			// The group's attributes live in the observation while they
			// fit: the line is written once, and nothing changes them.
			store := o.storeAttrs[:0]
			for _, c := range o.storeMS {
				msKey, callsKey := storeKeys(c.op)
				store = append(store, slog.Float64(msKey, c.ms))
				if c.calls > 1 || c.op == "wait" || c.op == "renew" {
					store = append(store, slog.Int(callsKey, c.calls))
				}
			}
			attrs = append(attrs, slog.Attr{Key: "store", Value: slog.GroupValue(store...)})
		}
		if o.err != nil {
			attrs = append(attrs, slog.String("error", o.redact(o.err.Error())))
		}
		if o.permanent {
			attrs = append(attrs, slog.Bool("permanent", true))
		}
		// Straight to the handler: Logger.LogAttrs would also walk the stack
		// for the caller's program counter, which here is always this line
		// (a source attribute, where a handler adds one, is left out).
		r := slog.NewRecord(time.Now(), level, "idempotency", 0)
		r.AddAttrs(attrs...)
		_ = h.Handle(ctx, r)
	}

	var names [6]string
	counts := append(names[:0], string(o.outcome))
	if o.claimed {
		counts = append(counts, metricClaimed)
	}
	if o.cached {
		counts = append(counts, metricCacheHit)
	}
	if o.waited {
		counts = append(counts, metricWaited)
	}
	if o.retried() {
		counts = append(counts, metricStoreRetried)
	}
	if o.permanent {
		counts = append(counts, metricStorePermanent)
	}
	metrics.Write(o.start, counts)
}

// storeKeys are the log keys of a Store operation's latency and call count;
// constants for the operations there are, so that no line builds them.
func storeKeys(op string) (ms, calls string) {
	switch op {
	case "claim":
		return "claim_ms", "claim_calls"
	case "complete":
		return "complete_ms", "complete_calls"
	case "release":
		return "release_ms", "release_calls"
	case "renew":
		return "renew_ms", "renew_calls"
	case "wait":
		return "wait_ms", "wait_calls"
	}
	return op + "_ms", op + "_calls"
}
