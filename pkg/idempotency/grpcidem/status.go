package grpcidem

import (
	"errors"
	"net/http"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// refusal carries; its reason is the library's code (idempotency.Code…)
// in upper case, e.g. IDEMPOTENCY_KEY_IN_USE.
const ErrorDomain = "ichido"

// httpStatus is the HTTP status of each gRPC code, as google.rpc.Code
// documents the mapping.
var httpStatus = map[codes.Code]int{
	codes.Canceled:           499,
	codes.Unknown:            http.StatusInternalServerError,
	codes.InvalidArgument:    http.StatusBadRequest,
	codes.DeadlineExceeded:   http.StatusGatewayTimeout,
	codes.NotFound:           http.StatusNotFound,
	codes.AlreadyExists:      http.StatusConflict,
	codes.PermissionDenied:   http.StatusForbidden,
	codes.ResourceExhausted:  http.StatusTooManyRequests,
	codes.FailedPrecondition: http.StatusBadRequest,
	codes.Aborted:            http.StatusConflict,
	codes.OutOfRange:         http.StatusBadRequest,
	codes.Unimplemented:      http.StatusNotImplemented,
	codes.Internal:           http.StatusInternalServerError,
	codes.Unavailable:        http.StatusServiceUnavailable,
	codes.DataLoss:           http.StatusInternalServerError,
	codes.Unauthenticated:    http.StatusUnauthorized,
}

// Storable reports whether a handler's error with this code is kept and
// replayed, as the HTTP shapes keep a response (idempotency.Storable) of
// the code's HTTP status: InvalidArgument, FailedPrecondition, OutOfRange,
// Unauthenticated, PermissionDenied and NotFound, which a retry of the
// same call would get again. Every other error (Aborted, AlreadyExists and
// ResourceExhausted, transient like 409 and 429; Canceled,
// DeadlineExceeded, Unavailable, Internal, Unknown, an error that is no
// status) releases the key, so that the retry runs the handler again.
func Storable(code codes.Code) bool {
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

// refusal is the status of a call that Function did not answer with the
// handler's response: the one place where this package's outcomes become
// gRPC statuses. No internal error text reaches the client.
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
		return refuse(codes.Unauthenticated, idempotency.CodeUnauthenticated, "no authenticated user", false)
	case errors.As(err, &badKey):
		return refuse(codes.InvalidArgument, idempotency.CodeKeyInvalid, "invalid "+MetadataKey+" metadata: "+badKey.reason, false)
	case errors.Is(err, idempotency.ErrNoKey):
		return refuse(codes.InvalidArgument, idempotency.CodeKeyMissing, "missing "+MetadataKey+" metadata: this method needs an idempotency key", false)
	case errors.Is(err, idempotency.ErrInProgress):
		return refuse(codes.Aborted, idempotency.CodeKeyInUse, "a call with this idempotency key is still in progress; retry later", true)
	case errors.Is(err, idempotency.ErrKeyReused):
		return refuse(codes.FailedPrecondition, idempotency.CodeKeyReused, "this idempotency key was already used with another request", false)
	case errors.Is(err, idempotency.ErrResultNotKept):
		return refuse(codes.FailedPrecondition, idempotency.CodeResponseNotKept, "the call with this idempotency key completed, but its response could not be kept for replay", false)
	case idemstore.IsPermanent(err):
		return refuse(codes.Internal, idempotency.CodeStoreMisconfigured, "the idempotency store refused the call; the service must be fixed", false)
	}
	var se *idemstore.Error
	if errors.As(err, &se) {
		return refuse(codes.Unavailable, idempotency.CodeStoreUnavailable, "the idempotency store is unavailable; retry later", true)
	}
	// A stored answer that does not decode, a request that does not
	// encode: nothing the client can change.
	return status.Error(codes.Internal, "idempotency: the call could not be processed")
}

// refuse builds a refusal: the code, a message for the client, an
// ErrorInfo with the library's code and, when retrying the same call
// later can succeed, a RetryInfo of one second (HTTP's Retry-After: 1).
func refuse(code codes.Code, reason, msg string, retry bool) error {
	st := status.New(code, "idempotency: "+msg)
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: strings.ToUpper(reason), Domain: ErrorDomain}}
	if retry {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
