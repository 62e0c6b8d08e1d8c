package idempotency

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// Every code of the decorator's refusals has a title and a type of its own.
func TestEveryProblemCodeHasATitle(t *testing.T) {
	t.Parallel()
	for _, code := range []string{CodeKeyMissing, CodeKeyInvalid, CodeUnauthenticated, CodeKeyInUse,
		CodeKeyReused, CodeStoreUnavailable, CodeValidation, CodePayloadTooLarge} {
		d := problem.New(http.StatusBadRequest, code, "")
		require.NotEmpty(t, d.Title, code)
		require.Equal(t, "https://ichido.dev/problems/"+code, d.Type)
	}
}
