package taskfn_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/taskfn"
)

// TestServeRefusesToStart: every function's main is Serve; a missing setting
// or an unknown function stops it with an error, before any connection and
// without a panic.
func TestServeRefusesToStart(t *testing.T) {
	t.Parallel()
	empty := func(string) string { return "" }
	for _, id := range taskfn.LogicalIDs() {
		err := taskfn.Serve(context.Background(), id, empty)
		require.ErrorIs(t, err, taskfn.ErrConfig, id)
		require.ErrorContains(t, err, "DB_AUTH", id)
	}
	err := taskfn.Serve(context.Background(), "NoSuchFunction", empty)
	require.ErrorContains(t, err, `no function "NoSuchFunction"`)
	require.NotErrorIs(t, err, taskfn.ErrConfig)
}
