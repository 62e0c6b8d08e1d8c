package pgstore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idempotencytest"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestLostClaimReply cuts the connection after PostgreSQL committed a claim
// and before its reply arrives: the request still gets its handler's answer,
// and its retry the replay, instead of 503 and then 409 for the lease.
func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	cutter := idempotencytest.NewReplyCutter(t, u.Host)
	u.Host = cutter.Addr()
	st := pgstore.New(newPool(t, u.String(), nil), nil)
	idempotencytest.RunLostClaimReply(t, st, cutter)
}
