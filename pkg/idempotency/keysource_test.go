package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// A net/http ServeMux pattern's wildcards are the request's path
// parameters, so PathKey reads them behind Middleware as behind API
// Gateway.
func TestMiddlewarePathKeyFromServeMuxPattern(t *testing.T) {
	t.Parallel()
	runs := 0
	mw, err := idempotency.Middleware(quiet(idempotency.Config{
		Store:     memstore.New(),
		Subject:   idempotency.StaticSubject("auth0|webhooks"),
		KeyFormat: idempotency.KeyOpaque,
		Key:       idempotency.PathKey("delivery"),
	}))
	require.NoError(t, err)
	mux := http.NewServeMux()
	var params map[string]string
	mux.Handle("POST /deliveries/{delivery}/{rest...}", mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		params = idempotency.RequestFromHTTP(r, nil).PathParameters
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "run %d", runs)
	})))
	srv := httptest.NewServer(mux)
	defer srv.Close()

	post := func(path string) (*http.Response, string) {
		resp, err := http.Post(srv.URL+path, "application/json", strings.NewReader(`{}`))
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, string(body)
	}
	first, body := post("/deliveries/dlv-1/a/b")
	require.Equal(t, http.StatusAccepted, first.StatusCode)
	require.Equal(t, "run 1", body)
	require.Equal(t, map[string]string{"delivery": "dlv-1", "rest": "a/b"}, params)
	again, body := post("/deliveries/dlv-1/a/b")
	require.Equal(t, http.StatusAccepted, again.StatusCode)
	require.Equal(t, "run 1", body)
	require.Equal(t, "true", again.Header.Get(idempotency.ReplayedHeader))
	other, _ := post("/deliveries/dlv-2/a/b")
	require.Empty(t, other.Header.Get(idempotency.ReplayedHeader))
	require.Equal(t, 2, runs)
}

// The replay hook on a store whose claim returns no times gets them from
// the store's Admin capability; without one they stay zero and the hook
// still runs.
func TestReplayHookWithoutAdmin(t *testing.T) {
	t.Parallel()
	var hooked []idempotency.Replay
	store := timelessStore{memstore.New()}
	h, err := idempotency.Wrap(countingCreate(new(int)), quiet(idempotency.Config{
		Store: store,
		Settings: idempotency.Settings{
			OnReplay: func(_ context.Context, r *idempotency.Replay) { hooked = append(hooked, *r) },
		},
	}))
	require.NoError(t, err)
	req := v2Post("/tasks", "auth0|x", map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, `{}`)
	for range 2 {
		_, err := h(context.Background(), req)
		require.NoError(t, err)
	}
	require.Len(t, hooked, 1)
	require.True(t, hooked[0].CreatedAt.IsZero())
	require.True(t, hooked[0].ExpiresAt.IsZero())
	require.Equal(t, `{"run":1}`, hooked[0].Response.Body)
}

// timelessStore answers claims without the record's times, as pgstore's
// does, and has no Admin capability.
type timelessStore struct{ inner *memstore.Store }

func (s timelessStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	res, err := s.inner.Claim(ctx, c)
	if !res.Claimed {
		res.Record.CreatedAt, res.Record.ExpiresAt = time.Time{}, time.Time{}
	}
	return res, err
}

func (s timelessStore) Complete(ctx context.Context, c idemstore.Completion) error {
	return s.inner.Complete(ctx, c)
}

func (s timelessStore) Release(ctx context.Context, r idemstore.Ref) error {
	return s.inner.Release(ctx, r)
}

func (s timelessStore) Renew(ctx context.Context, r idemstore.Renewal) error {
	return s.inner.Renew(ctx, r)
}
