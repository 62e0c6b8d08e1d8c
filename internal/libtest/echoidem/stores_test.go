package echoidem_test

import (
	"net/http"
	"os"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency/echoidem"
)

// TestMain stops the servers the tests shared.
func TestMain(m *testing.M) { os.Exit(storekit.Main(m)) }

// mount puts the idempotency middleware in an Echo router as an
// application does: Echo's request id middleware before it, a catch-all
// route after it.
func mount(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	e := echo.New()
	e.Use(middleware.RequestID(), echoidem.Adapt(mw))
	e.Any("/*", echo.WrapHandler(h))
	return e
}

// TestMiddlewareBehaviour runs the library's HTTP behaviour table over real
// HTTP through an Echo router, on every store.
func TestMiddlewareBehaviour(t *testing.T) {
	t.Parallel()
	storekit.RunMiddleware(t, mount)
}
