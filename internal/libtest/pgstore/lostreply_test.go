package pgstore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestLostClaimReply cuts the connection after PostgreSQL committed a claim
// and before its reply arrives: the request still gets its handler's answer,
// and its retry the replay, instead of 503 and then 409 for the lease.
func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	storetest.Run(t, storetest.Config{Parts: storetest.LostReply, Server: u.Host, Through: func(t *testing.T, addr string) idemstore.Store {
		u.Host = addr
		return must.Value(pgstore.New(newPool(t, u.String(), nil), nil))
	}})
}
