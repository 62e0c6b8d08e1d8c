package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// slowClaims answers every claim only after delay, as a store whose reply
// is held up.
type slowClaims struct {
	*memstore.Store
	delay time.Duration
}

func (s slowClaims) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, c)
	time.Sleep(s.delay)
	return res, err
}

// TestHeartbeatRunStartsToldWhenItsClaimCameBackLate: a claim whose answer
// arrives after its lease could have run out gives the handler a context
// already cancelled, with a cause that wraps ErrLeaseLost, rather than a
// live one for the moment the first beat takes.
func TestHeartbeatRunStartsToldWhenItsClaimCameBackLate(t *testing.T) {
	const beat = 300 * time.Millisecond
	var cause error
	f, err := idempotency.Function(func(ctx context.Context, id string) (string, error) {
		cause = context.Cause(ctx) // read at once, before any beat could run
		return "done", ctx.Err()
	}, idempotency.FunctionConfig[string]{
		Store:    slowClaims{memstore.New(), beat},
		Name:     "late",
		Key:      func(_ context.Context, id string) (string, error) { return id, nil },
		Settings: quiet(idempotency.Config{Settings: idempotency.Settings{Heartbeat: beat}}).Settings,
	})
	require.NoError(t, err)
	_, err = f(context.Background(), "k1")
	require.ErrorIs(t, err, context.Canceled)
	require.True(t, errors.Is(cause, idemstore.ErrLeaseLost), "cause: %v", cause)
}
