package dynamostore

import (
	"errors"
	"fmt"

	"github.com/ichido/ichido/pkg/idempotency"
)

// errTooLarge marks a response whose record would not fit in one item.
var errTooLarge = errors.New("the response is larger than the largest record the store can keep")

func tooLarge(size int) error {
	return fmt.Errorf("%w: the completed record would be %d bytes, DynamoDB's item limit is %d", errTooLarge, size, MaxItemBytes)
}

func newStoreError(op string, err error, permanent bool) error {
	_ = permanent
	return &idempotency.StoreError{Op: op, Err: err}
}

func notKeptOf(idempotency.StoredResponse) bool    { return false }
func setNotKept(*idempotency.StoredResponse, bool) {}
