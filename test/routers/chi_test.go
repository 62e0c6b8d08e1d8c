// Package routers runs the library's HTTP behaviour table through routers
// other than the standard library's ServeMux. It lives in the repository's
// root module, not in the library's (pkg/go.mod), so that the library's
// users do not get the routers as dependencies.
package routers_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestMiddlewareBehaviourChi runs the HTTP behaviour table through a chi
// router, with chi's own middleware around the idempotency middleware.
func TestMiddlewareBehaviourChi(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Middleware, New: func(*testing.T) idemstore.Store { return memstore.New() }, Mount: func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
		r := chi.NewRouter()
		r.Use(middleware.RequestID)
		r.Use(mw)
		r.Handle("/*", h)
		return r
	}})
}
