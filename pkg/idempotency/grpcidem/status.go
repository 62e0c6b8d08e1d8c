package grpcidem

import (
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ichido/ichido/pkg/idempotency/internal/rpcidem"
)

// ErrorDomain is the domain of the google.rpc.ErrorInfo detail that every
// refusal carries; its reason is the library's code (idempotency.Code…)
// in upper case, e.g. IDEMPOTENCY_KEY_IN_USE.
const ErrorDomain = "ichido"

// Storable reports whether a handler's error with this code is kept and
// replayed. It follows idempotency.Storable for the code's HTTP status. The
// codes kept are InvalidArgument, FailedPrecondition, OutOfRange,
// Unauthenticated, PermissionDenied and NotFound. A retry of the same call
// would get them again. Every other error releases the key, so that the retry
// runs the handler again. Those are Aborted, AlreadyExists and
// ResourceExhausted, transient like 409 and 429. They are also Canceled,
// DeadlineExceeded, Unavailable, Internal, Unknown, and an error that is no
// status.
func Storable(code codes.Code) bool {
	return rpcidem.Storable(rpcidem.Code(code))
}

// codeOf is the code of a handler's error: that of the gRPC status it
// holds, Unknown for any other error.
func codeOf(err error) rpcidem.Code {
	if st, ok := status.FromError(err); ok {
		return rpcidem.Code(st.Code())
	}
	return rpcidem.Unknown
}

// refusal is the status of a call that Function did not answer with the
// handler's response: the one place where this package's outcomes become
// gRPC statuses. It carries the refusal's code and message, an ErrorInfo
// with the library's code and, when retrying the same call later can
// succeed, a RetryInfo (HTTP's Retry-After).
func refusal(r rpcidem.Refusal) error {
	st := status.New(codes.Code(r.Code), r.Message)
	if r.Reason == "" {
		return st.Err()
	}
	details := []protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: r.Reason, Domain: ErrorDomain}}
	if r.Retry {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(rpcidem.RetryAfter)})
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}
