package memstore_test

import (
	"testing"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idempotencytest"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(*testing.T) idempotency.Store { return memstore.New() })
}

func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	idempotencytest.RunHTTPBehaviour(t, func(*testing.T) idempotency.Store { return memstore.New() })
}

func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	idempotencytest.RunFunctionBehaviour(t, func(*testing.T) idempotency.Store { return memstore.New() })
}
