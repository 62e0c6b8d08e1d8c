package connectidem_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// TestRecordShared pins where and how a call's record is kept: grpcidem
// pins the same values, so that a service served by both packages on one
// store shares its keys (a repeat over either replays a call made over the
// other).
func TestRecordShared(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := serve(t, protocols[2], connectidem.Config{Store: store}, nil)
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	require.NoError(t, h.Call(storekit.CreateMethod, "alice", "a", key).Err)

	userID, recordKey, err := connectidem.RecordID("", idempotency.KeyUUIDv4, "alice", key)
	require.NoError(t, err)
	storekit.RequireSharedRecord(t, store, userID, recordKey)
}
