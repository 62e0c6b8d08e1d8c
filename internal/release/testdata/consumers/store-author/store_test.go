package kvstore_test

import (
	"testing"

	"example.com/store-author"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestStore(t *testing.T) {
	storetest.Run(t, storetest.Config{
		Parts: storetest.Contract | storetest.HTTP | storetest.Function,
		New:   func(*testing.T) idemstore.Store { return kvstore.New() },
	})
}
