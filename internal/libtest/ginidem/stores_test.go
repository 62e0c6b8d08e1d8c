package ginidem_test

import (
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
)

// TestMain keeps gin quiet (no debug lines on standard output) and stops
// the servers the tests shared.
func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	os.Exit(storekit.Main(m))
}

// mount puts the idempotency middleware in a gin router as an application
// does: gin's logger before it, a catch-all route after it, and 405 for a
// method the router does not know.
func mount(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(gin.LoggerWithWriter(io.Discard), ginidem.Adapt(mw))
	r.Any("/*path", gin.WrapH(h))
	return r
}

// TestMiddlewareBehaviour runs the library's HTTP behaviour table over real
// HTTP through a gin router, on every store.
func TestMiddlewareBehaviour(t *testing.T) {
	t.Parallel()
	storekit.RunMiddleware(t, mount)
}
