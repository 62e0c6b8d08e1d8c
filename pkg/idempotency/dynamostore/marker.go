package dynamostore

import (
	"fmt"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// errTooLarge marks a response whose record would not fit in one item.
var errTooLarge = idemstore.ErrTooLarge

func tooLarge(size, limit int) error {
	return fmt.Errorf("%w: the completed record would be %d bytes, the most this store writes is %d (Options.MaxRecordBytes; DynamoDB's item limit is %d)", errTooLarge, size, limit, MaxItemBytes)
}

func newStoreError(op string, err error, permanent bool) error {
	return &idemstore.Error{Op: op, Err: err, Permanent: permanent}
}

func notKeptOf(r idemstore.Response) bool            { return r.NotKept }
func setNotKept(r *idemstore.Response, notKept bool) { r.NotKept = notKept }
