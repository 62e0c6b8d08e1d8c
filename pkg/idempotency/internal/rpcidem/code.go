package rpcidem

import (
	"net/http"

	"github.com/ichido/ichido/pkg/idempotency"
)

// Code is a status code: the number of a gRPC code, which google.rpc.Code
// defines and connect.Code shares.
type Code uint32

// The codes, as google.rpc.Code numbers them.
const (
	Canceled           Code = 1
	Unknown            Code = 2
	InvalidArgument    Code = 3
	DeadlineExceeded   Code = 4
	NotFound           Code = 5
	AlreadyExists      Code = 6
	PermissionDenied   Code = 7
	ResourceExhausted  Code = 8
	FailedPrecondition Code = 9
	Aborted            Code = 10
	OutOfRange         Code = 11
	Unimplemented      Code = 12
	Internal           Code = 13
	Unavailable        Code = 14
	DataLoss           Code = 15
	Unauthenticated    Code = 16
)

// httpStatus is the HTTP status of each code, as google.rpc.Code documents
// the mapping.
var httpStatus = map[Code]int{
	Canceled:           499,
	Unknown:            http.StatusInternalServerError,
	InvalidArgument:    http.StatusBadRequest,
	DeadlineExceeded:   http.StatusGatewayTimeout,
	NotFound:           http.StatusNotFound,
	AlreadyExists:      http.StatusConflict,
	PermissionDenied:   http.StatusForbidden,
	ResourceExhausted:  http.StatusTooManyRequests,
	FailedPrecondition: http.StatusBadRequest,
	Aborted:            http.StatusConflict,
	OutOfRange:         http.StatusBadRequest,
	Unimplemented:      http.StatusNotImplemented,
	Internal:           http.StatusInternalServerError,
	Unavailable:        http.StatusServiceUnavailable,
	DataLoss:           http.StatusInternalServerError,
	Unauthenticated:    http.StatusUnauthorized,
}

// Storable reports whether a handler's error with this code is kept and
// replayed: when the HTTP shapes keep a response of the code's HTTP status
// (idempotency.Storable), which a retry of the same call would get again.
// The adapters' Storable documents the codes.
func Storable(code Code) bool {
	s, ok := httpStatus[code]
	return ok && idempotency.Storable(s)
}
