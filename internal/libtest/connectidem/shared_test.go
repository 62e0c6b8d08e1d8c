package connectidem_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
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
	require.NoError(t, h.create("alice", "a", key).err)

	userID, recordKey, err := connectidem.RecordID("", idempotency.KeyUUIDv4, "alice", key)
	require.NoError(t, err)
	require.Equal(t, "bd2ddae5-63ea-8b7c-bb9f-702e49b58309", userID)
	require.Equal(t, "408fd72c-15f8-84bc-8b85-215319964ff4", recordKey)
	rec, ok, err := store.Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.Equal(t, "d86de7802d3c7d722713b89716cdcd0d0e77d6bce33c8bfa09fd2e666292a76d", rec.Fingerprint, "the fingerprint of Create(\"a\")")
	require.JSONEq(t, `{"type":"google.protobuf.Struct","message":"ChAKA3J1bhIJEQAAAAAAAPA/CgwKBXRpdGxlEgMaAWE="}`, rec.Response.Body)
}
