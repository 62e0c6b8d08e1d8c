package idempotency_test

import (
	"testing"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idempotencytest"
)

func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	idempotencytest.RunHTTPBehaviour(t, func(*testing.T) idempotency.Store { return newMemStore() })
}

func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	idempotencytest.RunFunctionBehaviour(t, func(*testing.T) idempotency.Store { return newMemStore() })
}
