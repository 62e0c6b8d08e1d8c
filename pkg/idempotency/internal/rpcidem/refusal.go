package rpcidem

import (
	"errors"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// RetryAfter is how long a refusal that a retry can get past asks the
// client to wait: the delay of its google.rpc.RetryInfo, and HTTP's
// Retry-After: 1.
const RetryAfter = time.Second

// Refusal is the answer to a call that Function did not answer with the
// handler's: what the adapter builds its framework's status from.
type Refusal struct {
	// Code is the status code.
	Code Code
	// Message is the status message, written for the client: no internal
	// error text reaches it.
	Message string
	// Reason is the reason of the google.rpc.ErrorInfo (in the adapter's
	// ErrorDomain) that the status carries: the library's code in upper case,
	// e.g. IDEMPOTENCY_KEY_IN_USE. When it is "", the status carries no
	// details.
	Reason string
	// Retry reports that retrying the same call later can succeed: the
	// status then carries a google.rpc.RetryInfo of RetryAfter.
	Retry bool
}

// unauthenticatedError is a call without an authenticated user.
type unauthenticatedError struct{ err error }

func (e *unauthenticatedError) Error() string { return "no authenticated user: " + e.err.Error() }
func (e *unauthenticatedError) Unwrap() error { return e.err }

// keyError is a malformed key; its text is written for the client.
type keyError struct{ reason string }

func (e *keyError) Error() string { return e.reason }

// noKeyError is a call of a protected method without a key.
type noKeyError struct {
	method string
	err    error
}

func (e *noKeyError) Error() string { return e.method + ": " + e.err.Error() }
func (e *noKeyError) Unwrap() error { return e.err }

// Refuse returns the refusal of err, an error of Engine.Call: the one
// place where the adapters' outcomes become codes.
func (e *Engine[Req, Resp]) Refuse(err error) Refusal {
	key := e.fw.KeyName + " " + e.fw.KeyCarrier
	var (
		unauth *unauthenticatedError
		badKey *keyError
		noKey  *noKeyError
	)
	switch {
	case errors.As(err, &unauth):
		return refusal(Unauthenticated, idempotency.CodeUnauthenticated, "no authenticated user", false)
	case errors.As(err, &badKey):
		return refusal(InvalidArgument, idempotency.CodeKeyInvalid, "invalid "+key+": "+badKey.reason, false)
	case errors.Is(err, idempotency.ErrNoTenant):
		return refusal(Unauthenticated, idempotency.CodeUnauthenticated, "the call carries no tenant, and this service requires one", false)
	case errors.As(err, &noKey):
		return refusal(InvalidArgument, idempotency.CodeKeyMissing, "missing "+key+": "+e.fw.Target+" "+noKey.method+
			" is protected, so every call needs an idempotency key; if it only reads, the service should leave it out of the protected "+e.fw.Target+
			"s (Config.Methods) or declare it idempotency_level = NO_SIDE_EFFECTS", false)
	case errors.Is(err, idempotency.ErrNoKey):
		return refusal(InvalidArgument, idempotency.CodeKeyMissing, "missing "+key+": this "+e.fw.Target+" needs an idempotency key", false)
	case errors.Is(err, idempotency.ErrShuttingDown):
		return refusal(Unavailable, idempotency.CodeStoreUnavailable, "this server is shutting down; retry on another", true)
	case errors.Is(err, idempotency.ErrInProgress):
		return refusal(Aborted, idempotency.CodeKeyInUse, "a call with this idempotency key is still in progress; retry later", true)
	case errors.Is(err, idempotency.ErrKeyReused):
		return refusal(FailedPrecondition, idempotency.CodeKeyReused, "this idempotency key was already used with another request", false)
	case errors.Is(err, idempotency.ErrResultNotKept):
		return refusal(FailedPrecondition, idempotency.CodeResponseNotKept, "the call with this idempotency key completed, but its response could not be kept for replay", false)
	case idemstore.IsPermanent(err):
		return refusal(Internal, idempotency.CodeStoreMisconfigured, "the idempotency store refused the call; the service must be fixed", false)
	}
	var se *idemstore.Error
	if errors.As(err, &se) {
		return refusal(Unavailable, idempotency.CodeStoreUnavailable, "the idempotency store is unavailable; retry later", true)
	}
	// A stored answer that does not decode, a request that does not
	// encode: nothing the client can change.
	return Refusal{Code: Internal, Message: "idempotency: the call could not be processed"}
}

// refusal builds a refusal with an ErrorInfo of the library's code.
func refusal(code Code, reason, msg string, retry bool) Refusal {
	return Refusal{Code: code, Message: "idempotency: " + msg, Reason: strings.ToUpper(reason), Retry: retry}
}
