package dynamostore

import (
	"fmt"

	"github.com/ichido/ichido/pkg/idempotency"
)

// errTooLarge marks a response whose record would not fit in one item.
var errTooLarge = idempotency.ErrTooLarge

func tooLarge(size int) error {
	return fmt.Errorf("%w: the completed record would be %d bytes, DynamoDB's item limit is %d (MaxItemBytes)", errTooLarge, size, MaxItemBytes)
}

func newStoreError(op string, err error, permanent bool) error {
	return &idempotency.StoreError{Op: op, Err: err, Permanent: permanent}
}

func notKeptOf(r idempotency.StoredResponse) bool          { return r.NotKept }
func setNotKept(r *idempotency.StoredResponse, notKept bool) { r.NotKept = notKept }
