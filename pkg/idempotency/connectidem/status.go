package connectidem

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// refusal carries; its reason is the library's code (idempotency.Code…)
// in upper case, e.g. IDEMPOTENCY_KEY_IN_USE.
const ErrorDomain = "ichido"

// httpStatus is the HTTP status of each code, as google.rpc.Code (whose
// codes Connect's are) documents the mapping.
var httpStatus = map[connect.Code]int{
	connect.CodeCanceled:           499,
	connect.CodeUnknown:            http.StatusInternalServerError,
	connect.CodeInvalidArgument:    http.StatusBadRequest,
	connect.CodeDeadlineExceeded:   http.StatusGatewayTimeout,
	connect.CodeNotFound:           http.StatusNotFound,
	connect.CodeAlreadyExists:      http.StatusConflict,
	connect.CodePermissionDenied:   http.StatusForbidden,
	connect.CodeResourceExhausted:  http.StatusTooManyRequests,
	connect.CodeFailedPrecondition: http.StatusBadRequest,
	connect.CodeAborted:            http.StatusConflict,
	connect.CodeOutOfRange:         http.StatusBadRequest,
	connect.CodeUnimplemented:      http.StatusNotImplemented,
	connect.CodeInternal:           http.StatusInternalServerError,
	connect.CodeUnavailable:        http.StatusServiceUnavailable,
	connect.CodeDataLoss:           http.StatusInternalServerError,
	connect.CodeUnauthenticated:    http.StatusUnauthorized,
}

// Storable reports whether a handler's error with this code is kept and
// replayed, as the HTTP shapes keep a response (idempotency.Storable) of
// the code's HTTP status: InvalidArgument, FailedPrecondition, OutOfRange,
// Unauthenticated, PermissionDenied and NotFound, which a retry of the
// same call would get again. Every other error (Aborted, AlreadyExists and
// ResourceExhausted, transient like 409 and 429; Canceled,
// DeadlineExceeded, Unavailable, Internal, Unknown, an error that is not a
// *connect.Error) releases the key, so that the retry runs the handler
// again.
func Storable(code connect.Code) bool {
	s, ok := httpStatus[code]
	return ok && idempotency.Storable(s)
}

// unauthenticatedError is a call without an authenticated user.
type unauthenticatedError struct{ err error }

func (e *unauthenticatedError) Error() string { return "no authenticated user: " + e.err.Error() }
func (e *unauthenticatedError) Unwrap() error { return e.err }

// keyError is a malformed key; its text is written for the client.
type keyError struct{ reason string }

func (e *keyError) Error() string { return e.reason }

// keyHeader is the key header as refusals name it.
const keyHeader = idempotency.HeaderName + " header"

// refusal is the error of a call that Function did not answer with the
// handler's response: the one place where this package's outcomes become
// Connect errors. No internal error text reaches the client.
func refusal(err error) error {
	if herr, ok := asHandlerError(err); ok {
		return herr
	}
	var (
		unauth *unauthenticatedError
		badKey *keyError
	)
	switch {
	case errors.As(err, &unauth):
		return refuse(connect.CodeUnauthenticated, idempotency.CodeUnauthenticated, "no authenticated user", false)
	case errors.As(err, &badKey):
		return refuse(connect.CodeInvalidArgument, idempotency.CodeKeyInvalid, "invalid "+keyHeader+": "+badKey.reason, false)
	case errors.Is(err, idempotency.ErrNoKey):
		return refuse(connect.CodeInvalidArgument, idempotency.CodeKeyMissing, "missing "+keyHeader+": this procedure needs an idempotency key", false)
	case errors.Is(err, idempotency.ErrInProgress):
		return refuse(connect.CodeAborted, idempotency.CodeKeyInUse, "a call with this idempotency key is still in progress; retry later", true)
	case errors.Is(err, idempotency.ErrKeyReused):
		return refuse(connect.CodeFailedPrecondition, idempotency.CodeKeyReused, "this idempotency key was already used with another request", false)
	case errors.Is(err, idempotency.ErrResultNotKept):
		return refuse(connect.CodeFailedPrecondition, idempotency.CodeResponseNotKept, "the call with this idempotency key completed, but its response could not be kept for replay", false)
	case idemstore.IsPermanent(err):
		return refuse(connect.CodeInternal, idempotency.CodeStoreMisconfigured, "the idempotency store refused the call; the service must be fixed", false)
	}
	var se *idemstore.Error
	if errors.As(err, &se) {
		return refuse(connect.CodeUnavailable, idempotency.CodeStoreUnavailable, "the idempotency store is unavailable; retry later", true)
	}
	// A stored answer that does not decode, a request that does not
	// encode: nothing the client can change.
	return connect.NewError(connect.CodeInternal, errors.New("idempotency: the call could not be processed"))
}

// refuse builds a refusal: the code, a message for the client, an
// ErrorInfo with the library's code and, when retrying the same call
// later can succeed, a RetryInfo of one second and the header
// Retry-After: 1, as the HTTP shapes answer.
func refuse(code connect.Code, reason, msg string, retry bool) error {
	ce := connect.NewError(code, errors.New("idempotency: "+msg))
	details := []proto.Message{&errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: ErrorDomain}}
	if retry {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
		ce.Meta().Set("Retry-After", "1")
	}
	for _, m := range details {
		if d, err := connect.NewErrorDetail(m); err == nil {
			ce.AddDetail(d)
		}
	}
	return ce
}
