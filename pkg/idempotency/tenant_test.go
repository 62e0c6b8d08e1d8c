package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

type tenantKey struct{}

// TestMiddlewareTenantFromConfig: a server outside Lambda scopes its
// records by the tenant an outer middleware put in the request's context
// (Config.Tenant), over real HTTP: two tenants with the same user and key
// get records of their own, each replayed to its own tenant only.
func TestMiddlewareTenantFromConfig(t *testing.T) {
	store := memstore.New()
	mw, err := idempotency.Middleware(quiet(idempotency.Config{
		Store:   store,
		Subject: idempotency.StaticSubject("auth0|x"),
		Settings: idempotency.Settings{
			Tenant: func(ctx context.Context) string { s, _ := ctx.Value(tenantKey{}).(string); return s },
		},
	}))
	require.NoError(t, err)
	var runs atomic.Int32
	h := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ := idempotency.FromContext(r.Context())
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"run":%d,"tenant":%q}`, runs.Add(1), info.Tenant)
	}))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tenantKey{}, r.Header.Get("X-Tenant"))))
	}))
	defer srv.Close()
	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	post := func(tenant string) (string, string) {
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/tasks", strings.NewReader(`{}`))
		require.NoError(t, err)
		req.Header.Set("Idempotency-Key", key)
		req.Header.Set("X-Tenant", tenant)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return string(body), resp.Header.Get(idempotency.ReplayedHeader)
	}
	a, _ := post("a")
	b, replayed := post("b")
	require.Empty(t, replayed)
	require.Equal(t, `{"run":1,"tenant":"a"}`, a)
	require.Equal(t, `{"run":2,"tenant":"b"}`, b)
	again, replayed := post("a")
	require.Equal(t, "true", replayed)
	require.Equal(t, a, again)
	user := idempotency.SubjectUUID("auth0|x")
	for _, tenant := range []string{"a", "b"} {
		_, found, err := store.Get(context.Background(), idempotency.TenantUserID(tenant, user), key)
		require.NoError(t, err)
		require.True(t, found, "tenant %s's record is kept under TenantUserID", tenant)
	}
	_, found, err := store.Get(context.Background(), user, key)
	require.NoError(t, err)
	require.False(t, found, "no record is kept under the bare user id")
	require.Equal(t, user, idempotency.TenantUserID("", user))
}
