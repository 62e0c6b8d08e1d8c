package idempotency

import "github.com/ichido/ichido/pkg/idempotency/idemstore"

// notKept is the marker response of a run that completed with status but
// whose response could not be kept.
func notKept(status int) idemstore.Response {
	return idemstore.Response{StatusCode: status, NotKept: true}
}
