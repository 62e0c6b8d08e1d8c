// Package observe is the seam between the idempotency engine and a tracing or
// metrics system. The engine imports nothing of OpenTelemetry or any other
// telemetry library. Settings.Observer takes an Observer, which a package of
// its own implements (otelidem, a module apart). So only its users get its
// dependencies.
//
// One protected call (an HTTP request, a Function call, one SQS record) is
// one Span: started before anything else, given every store call, and
// ended once with the call's Result. Nothing in a Call or a Result is a key,
// a subject, a path or a body: every field is bounded, so that it may
// become a metric attribute.
package observe

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// Observer starts the Span of each protected call.
type Observer interface {
	// Start is called when a protected call begins. The returned context
	// is the one the call goes on in (the handler's and the store calls'),
	// so that a span it carries is their parent.
	Start(ctx context.Context, c Call) (context.Context, Span)
}

// Span records one protected call. The engine calls it from the call's
// goroutine, except StoreCall for lease renewals, which come from the
// heartbeat's.
type Span interface {
	// Origin returns what a record completed by this call keeps, so that a
	// replay can link to this span (idemstore.Response.Origin); nil when
	// the span is not recorded. At is set by the engine.
	Origin() *idemstore.Origin
	// StoreCall records one store call: op is "claim", "complete",
	// "release", "renew", "wait" (a waiting duplicate's poll) or "get";
	// class is "" when it succeeded, else one of the Class values.
	StoreCall(op string, start time.Time, d time.Duration, class string)
	// End ends the span with the call's result; it is called once.
	End(r Result)
}

// Shapes of a Call.
const (
	ShapeHTTP     = "http"     // Wrap (API Gateway, Function URLs, ALB) and Middleware
	ShapeFunction = "function" // Function
	ShapeSQS      = "sqs"      // one record of an SQSHandler batch
)

// Classes of a failure, in StoreCall and Result.ErrorClass.
const (
	ClassTransient = "transient"  // the store may succeed when tried again
	ClassPermanent = "permanent"  // idemstore.IsPermanent: a deployment to fix
	ClassLeaseLost = "lease_lost" // idemstore.ErrLeaseLost
	ClassHandler   = "handler"    // the handler failed or panicked
)

// Call describes a protected call as it starts.
type Call struct {
	// Shape is one of ShapeHTTP, ShapeFunction, ShapeSQS.
	Shape string
	// Method is the HTTP method (ShapeHTTP).
	Method string
	// Function is FunctionConfig.Name (ShapeFunction, ShapeSQS).
	Function string
	// RPCMethod is the method of a gRPC or Connect call
	// ("package.Service/Method"), one the server registered (ShapeFunction).
	RPCMethod string
	// Store names the store's type, such as "pgstore" or "redisstore".
	Store string
}

// Result is what became of a protected call.
type Result struct {
	// Outcome is the log line's outcome (idempotency.Outcome's values).
	Outcome string
	// Status is the HTTP status answered (ShapeHTTP), 0 otherwise.
	Status int
	// Claimed: the handler ran. Replayed: a stored answer was given.
	Claimed, Replayed bool
	// Cached: answered from the local cache, with no store call.
	Cached bool
	// Waited: a duplicate waited for the first run's answer, for WaitedFor.
	Waited    bool
	WaitedFor time.Duration
	// Heartbeat: the run's lease was renewed while it ran.
	Heartbeat bool
	// Retried: a store call that failed was made again (a claim whose
	// reply may have been lost, a completion or release that failed).
	Retried bool
	// ErrorClass is "" or one of the Class values.
	ErrorClass string
	// Origin is, on a replay, the traced run that produced the answer (nil
	// when that run was not traced, or the record predates origins).
	Origin *idemstore.Origin
}

// Digest is the keyed digest that a log line shows in place of an identifier (a
// key, a user id) when Settings.LogDigestSecret is set. It is "h:" and the
// first 16 bytes of HMAC-SHA-256(secret, value) in hex. An operator who holds
// the secret computes it for a known key or user (keystore digest) to find the
// log lines of a record.
func Digest(secret []byte, value string) string {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(value))
	return "h:" + hex.EncodeToString(m.Sum(nil)[:16])
}
