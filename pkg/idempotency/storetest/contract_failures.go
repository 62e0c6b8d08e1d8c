package storetest

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// The cases of the contract's failure side: the not-kept marker, the
// largest record, permanent errors and CheckStore.

// notKeptMarker: a completion with idemstore.Response.NotKept is kept with its
// mark and status, and the next claim returns both.
func (s suite) notKeptMarker(t *testing.T) {
	st := s.newStore(t)
	r := newRef()
	mustClaim(t, st, claimAt(r, hash("a"), base))
	marker := idemstore.Response{StatusCode: http.StatusCreated, NotKept: true}
	require.NoError(t, st.Complete(context.Background(), completionAt(r, marker, base)))
	res := mustClaim(t, st, claimAt(withOwner(r), hash("a"), base.Add(time.Second)))
	require.False(t, res.Claimed)
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	require.NotNil(t, res.Record.Response)
	require.True(t, res.Record.Response.NotKept, "the mark is kept")
	require.Equal(t, http.StatusCreated, res.Record.Response.StatusCode)
	require.Empty(t, res.Record.Response.Body)

	// An ordinary response never comes back marked.
	r2 := newRef()
	mustClaim(t, st, claimAt(r2, hash("a"), base))
	require.NoError(t, st.Complete(context.Background(), completionAt(r2, jsonResponse, base)))
	res = mustClaim(t, st, claimAt(withOwner(r2), hash("a"), base.Add(time.Second)))
	require.False(t, res.Record.Response.NotKept)
}

// tooLarge: a response over the store's largest record is refused with a
// permanent idemstore.Error wrapping ErrTooLarge; nothing is written, the record
// stays the owner's, and the marker then completes it.
func (s suite) tooLarge(t *testing.T) {
	if s.opts.TooLargeBody <= 0 {
		t.Skip("storetest: Config.TooLargeBody not given")
	}
	st := s.newStore(t)
	r := newRef()
	mustClaim(t, st, claimAt(r, hash("a"), base))
	big := idemstore.Response{StatusCode: http.StatusOK, Headers: map[string]string{"Content-Type": "text/plain"}, Body: strings.Repeat("x", s.opts.TooLargeBody)}
	err := st.Complete(context.Background(), completionAt(r, big, base))
	require.ErrorIs(t, err, idemstore.ErrTooLarge)
	requireStoreError(t, err, "complete")
	require.True(t, idemstore.IsPermanent(err), "too large is permanent: %v", err)

	// Nothing was written: the record is still in progress, the owner's.
	res := mustClaim(t, st, claimAt(withOwner(r), hash("a"), base.Add(time.Second)))
	require.False(t, res.Claimed)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	res = mustClaim(t, st, claimAt(r, hash("a"), base.Add(time.Second)))
	require.True(t, res.Claimed, "the owner still holds it")

	marker := idemstore.Response{StatusCode: http.StatusOK, NotKept: true}
	require.NoError(t, st.Complete(context.Background(), completionAt(r, marker, base.Add(2*time.Second))))
	res = mustClaim(t, st, claimAt(withOwner(r), hash("a"), base.Add(3*time.Second)))
	require.Equal(t, idemstore.StatusCompleted, res.Record.Status)
	require.True(t, res.Record.Response.NotKept)
}

// misconfigured: every method of a store refused for good fails with a
// permanent idemstore.Error, and CheckStore says so.
func (s suite) misconfigured(t *testing.T) {
	if s.opts.NewMisconfiguredStore == nil {
		t.Skip("storetest: Config.NewMisconfiguredStore not given")
	}
	st := s.opts.NewMisconfiguredStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c := claimAt(newRef(), hash("x"), base)
	res, err := st.Claim(ctx, c)
	requireStoreError(t, err, "claim")
	require.False(t, res.Claimed)
	require.True(t, idemstore.IsPermanent(err), "claim: %v", err)
	err = st.Complete(ctx, completionAt(c.Ref, jsonResponse, base))
	requireStoreError(t, err, "complete")
	require.True(t, idemstore.IsPermanent(err), "complete: %v", err)
	err = st.Release(ctx, c.Ref)
	requireStoreError(t, err, "release")
	require.True(t, idemstore.IsPermanent(err), "release: %v", err)
	err = idempotency.CheckStore(ctx, st)
	require.Error(t, err)
	require.True(t, idemstore.IsPermanent(err), "CheckStore: %v", err)
}

// checkStore: CheckStore passes on a working store, and its probe leaves
// the store's records as they were.
func (s suite) checkStore(t *testing.T) {
	st := s.newStore(t)
	ctx := context.Background()
	r := newRef()
	mustClaim(t, st, claimAt(r, hash("a"), base))
	for range 3 {
		require.NoError(t, idempotency.CheckStore(ctx, st))
	}
	// The caller's own record is untouched.
	res := mustClaim(t, st, claimAt(withOwner(r), hash("a"), base.Add(time.Second)))
	require.False(t, res.Claimed)
	require.Equal(t, idemstore.StatusInProgress, res.Record.Status)
	require.NoError(t, st.Release(ctx, r))
}

// countingStore counts the claims a store receives.
type countingStore struct {
	idemstore.Store
	claims atomic.Int32
}

func (c *countingStore) Claim(ctx context.Context, cl idemstore.Claim) (idemstore.ClaimResult, error) {
	c.claims.Add(1)
	return c.Store.Claim(ctx, cl)
}

func (s suite) decoratorPermanent(t *testing.T) {
	if s.opts.NewMisconfiguredStore == nil {
		t.Skip("storetest: Config.NewMisconfiguredStore not given")
	}
	st := &countingStore{Store: s.opts.NewMisconfiguredStore(t)}
	var runs atomic.Int64
	h := wrapV2(t, st, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: 201}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h(ctx, v2Request(uuid.NewString(), uuid.NewString(), `{}`))
	require.NoError(t, err)
	require.Zero(t, runs.Load(), "fail closed: the handler does not run")
	require.Equal(t, http.StatusInternalServerError, resp.StatusCode, resp.Body)
	require.Equal(t, idempotency.CodeStoreMisconfigured, problemCode(t, resp))
	require.Empty(t, header(resp, "Retry-After"), "no invitation to retry what cannot succeed")
	require.EqualValues(t, 1, st.claims.Load(), "a permanent failure is not retried")
	for _, internal := range []string{"permission", "denied", "NOPERM", "StoreError", "idempotency store claim"} {
		require.NotContains(t, resp.Body, internal, "no internal error text reaches the client")
	}
}

func (s suite) decoratorTooLarge(t *testing.T) {
	if s.opts.TooLargeBody <= 0 {
		t.Skip("storetest: Config.TooLargeBody not given")
	}
	st := s.newStore(t)
	body := strings.Repeat("y", s.opts.TooLargeBody)
	var runs atomic.Int64
	h := wrapV2(t, st, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: body}, nil
	})
	user, key := uuid.NewString(), uuid.NewString()
	first, err := h(context.Background(), v2Request(user, key, `{}`))
	require.NoError(t, err)
	require.Equal(t, 200, first.StatusCode)
	require.Equal(t, len(body), len(first.Body), "the first client gets the handler's response")
	for range 2 {
		retry, err := h(context.Background(), v2Request(user, key, `{}`))
		require.NoError(t, err)
		require.Equal(t, http.StatusUnprocessableEntity, retry.StatusCode, retry.Body)
		require.Equal(t, idempotency.CodeResponseNotKept, problemCode(t, retry))
		require.Empty(t, header(retry, "Retry-After"))
	}
	require.Equal(t, int64(1), runs.Load(), "the handler never runs twice")
}

func (s suite) functionTooLarge(t *testing.T) {
	if s.opts.TooLargeBody <= 0 {
		t.Skip("storetest: Config.TooLargeBody not given")
	}
	st := s.newStore(t)
	var runs atomic.Int64
	f, err := idempotency.Function(func(ctx context.Context, id string) (string, error) {
		runs.Add(1)
		return strings.Repeat("z", s.opts.TooLargeBody), nil
	}, idempotency.FunctionConfig[string]{
		Store: st,
		Name:  "too-large-" + uuid.NewString(),
		Key:   func(_ context.Context, id string) (string, error) { return id, nil },
		Settings: idempotency.Settings{
			Clock:   func() time.Time { return base },
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	id := uuid.NewString()
	first, err := f(context.Background(), id)
	require.NoError(t, err, "the caller gets the result it made")
	require.Len(t, first, s.opts.TooLargeBody)
	for range 2 {
		_, err = f(context.Background(), id)
		require.ErrorIs(t, err, idempotency.ErrResultNotKept)
	}
	require.Equal(t, int64(1), runs.Load(), "the function never runs twice")
}
