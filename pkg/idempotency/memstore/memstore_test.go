package memstore_test

import (
	"testing"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}

func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}

func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Function, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}
