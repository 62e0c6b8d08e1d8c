package webhook_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/webhook"
)

// preset returns the named provider's preset with the tests' secret.
func preset(t *testing.T, name string) webhook.Provider {
	t.Helper()
	var p webhook.Provider
	var err error
	switch name {
	case "github":
		p, err = webhook.GitHub(githubSecret)
	case "shopify":
		p, err = webhook.Shopify(shopifySecret)
	case "stripe":
		p, err = webhook.Stripe(stripeSecret, nil)
	}
	require.NoError(t, err)
	return p
}

func newMem() *memstore.Store { return memstore.New() }

func timeNow() time.Time { return time.Now() }
