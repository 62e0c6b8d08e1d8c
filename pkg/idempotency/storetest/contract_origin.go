package storetest

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// originOf is the origin of a traced run that completed at, as the engine
// gives it: at carries nanoseconds and a zone, which the store drops.
func originOf(trace, span string, at time.Time) *idemstore.Origin {
	return &idemstore.Origin{TraceID: trace, SpanID: span, At: at}
}

// withOrigin returns resp with origin o.
func withOrigin(resp idemstore.Response, o *idemstore.Origin) idemstore.Response {
	resp.Origin = o
	return resp
}

// requireOrigin checks that got is want as a store keeps it: the same ids,
// At to the microsecond, in UTC; nil stays nil.
func requireOrigin(t *testing.T, want *idemstore.Origin, got *idemstore.Response, what string) {
	t.Helper()
	require.NotNil(t, got, "%s: a completed record has its response", what)
	if want == nil {
		require.Nil(t, got.Origin, "%s: a response completed without an origin has none", what)
		return
	}
	require.NotNil(t, got.Origin, "%s: the origin is kept", what)
	require.Equal(t, want.TraceID, got.Origin.TraceID, "%s: the origin's trace id", what)
	require.Equal(t, want.SpanID, got.Origin.SpanID, "%s: the origin's span id", what)
	at := want.At.Truncate(time.Microsecond).UTC()
	require.True(t, at.Equal(got.Origin.At), "%s: the origin's time: want %s, got %s", what, at, got.Origin.At)
	require.Equal(t, time.UTC, got.Origin.At.Location(), "%s: the origin's time is in UTC", what)
}

// originKept: a completion's origin comes back with its record, from a
// replay's Claim and from Admin.Get, so that a replay can point at the run
// that produced it from the store alone; a completion without one comes
// back without one.
func (s suite) originKept(t *testing.T) {
	cet := time.FixedZone("CET", 3600)
	traced := originOf("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", base.Add(time.Second+123456789*time.Nanosecond).In(cet))

	t.Run("ReplayedAndRead", func(t *testing.T) {
		t.Parallel()
		st := s.newStore(t)
		for name, origin := range map[string]*idemstore.Origin{"with": traced, "without": nil} {
			resp := withOrigin(jsonResponse, origin)
			c := claimAt(newRef(), hash(name), base)
			mustClaim(t, st, c)
			require.NoError(t, st.Complete(context.Background(), completionAt(c.Ref, resp, base.Add(time.Second))))

			res := mustClaim(t, st, claimAt(withOwner(c.Ref), hash(name), base.Add(2*time.Second)))
			require.False(t, res.Claimed)
			require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
			requireResponse(t, resp, res.Record.Response)
			requireOrigin(t, origin, res.Record.Response, name+" an origin, the replay")

			a, ok := st.(idemstore.Admin)
			if !ok {
				continue
			}
			rec, found, err := a.Get(context.Background(), c.UserID, c.Key)
			require.NoError(t, err)
			require.True(t, found)
			requireResponse(t, resp, rec.Response)
			requireOrigin(t, origin, rec.Response, name+" an origin, Admin.Get")
		}
	})

	// Records with and without an origin side by side on one store, of
	// every shape the origin sits beside (headers, an empty or binary body,
	// the not-kept marker), each replayed as it was completed.
	t.Run("WithAndWithoutOnOneStore", func(t *testing.T) {
		t.Parallel()
		st := s.newStore(t)
		other := originOf("0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", base.Add(time.Minute))
		responses := []idemstore.Response{
			withOrigin(jsonResponse, traced),
			jsonResponse,
			withOrigin(idemstore.Response{StatusCode: http.StatusNoContent}, other),
			{StatusCode: http.StatusNoContent},
			withOrigin(idemstore.Response{StatusCode: http.StatusOK, Body: "\x00\xff binary \xfe", Headers: map[string]string{"Content-Type": "application/octet-stream"}}, traced),
			withOrigin(idemstore.Response{StatusCode: http.StatusCreated, NotKept: true}, other),
			{StatusCode: http.StatusCreated, NotKept: true},
			withOrigin(idemstore.Response{StatusCode: http.StatusOK, Body: "{}"}, originOf("", "", time.Time{})),
		}
		refs := make([]idemstore.Ref, len(responses))
		for i, resp := range responses {
			refs[i] = newRef()
			mustClaim(t, st, claimAt(refs[i], hash("a"), base))
			require.NoError(t, st.Complete(context.Background(), completionAt(refs[i], resp, base.Add(time.Second))))
		}
		for i := len(responses) - 1; i >= 0; i-- {
			want := responses[i]
			res := mustClaim(t, st, claimAt(withOwner(refs[i]), hash("a"), base.Add(2*time.Second)))
			require.False(t, res.Claimed, "response %d", i)
			require.Equal(t, idemstore.StatusCompleted, res.Record.Status, "response %d", i)
			requireResponse(t, want, res.Record.Response)
			require.Equal(t, want.NotKept, res.Record.Response.NotKept, "response %d: the not-kept marker", i)
			requireOrigin(t, want.Origin, res.Record.Response, fmt.Sprintf("response %d", i))
		}
	})
}
