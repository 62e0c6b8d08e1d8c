package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}

func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}

func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Function, New: func(*testing.T) idemstore.Store { return memstore.New() }})
}

// TestOriginIsNotShared: the store keeps its own copy of a response's
// origin; neither the completing caller nor a reader of the record can
// change it through the pointer it holds.
func TestOriginIsNotShared(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := memstore.New()
	now := time.Now()
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "owner"}
	claim := idemstore.Claim{Ref: ref, Fingerprint: "hash", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}
	_, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	at := time.Date(2030, 1, 2, 3, 4, 5, 678901234, time.FixedZone("CET", 3600))
	origin := &idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: at}
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 200, Origin: origin}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	origin.TraceID, origin.At = "changed by the caller", time.Time{}

	want := idemstore.Origin{TraceID: "4bf92f3577b34da6a3ce929d0e0e4736", SpanID: "00f067aa0ba902b7", At: time.Date(2030, 1, 2, 2, 4, 5, 678901000, time.UTC)}
	claim.Owner = "another owner"
	res, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.NotNil(t, res.Record.Response.Origin)
	require.Equal(t, want, *res.Record.Response.Origin)
	res.Record.Response.Origin.SpanID = "changed by a reader"

	rec, found, err := st.Get(ctx, ref.UserID, ref.Key)
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, want, *rec.Response.Origin)
	rec.Response.Origin.SpanID = "changed by an operator"

	res, err = st.Claim(ctx, claim)
	require.NoError(t, err)
	require.Equal(t, want, *res.Record.Response.Origin)
}
