package idempotency_test

import (
	"testing"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: func(*testing.T) idemstore.Store { return newMemStore() }})
}

func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Function, New: func(*testing.T) idemstore.Store { return newMemStore() }})
}
