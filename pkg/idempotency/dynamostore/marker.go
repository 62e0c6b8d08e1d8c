package dynamostore

import (
	"fmt"

	"github.com/ichido/ichido/pkg/idempotency"
)

// errTooLarge marks a response whose record would not fit in one item.
var errTooLarge = idempotency.ErrTooLarge

func tooLarge(size, limit int) error {
	return fmt.Errorf("%w: the completed record would be %d bytes, the most this store writes is %d (Options.MaxRecordBytes; DynamoDB's item limit is %d)", errTooLarge, size, limit, MaxItemBytes)
}

func newStoreError(op string, err error, permanent bool) error {
	return &idempotency.StoreError{Op: op, Err: err, Permanent: permanent}
}

func notKeptOf(r idempotency.StoredResponse) bool            { return r.NotKept }
func setNotKept(r *idempotency.StoredResponse, notKept bool) { r.NotKept = notKept }
