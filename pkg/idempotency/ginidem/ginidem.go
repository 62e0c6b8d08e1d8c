package ginidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ichido/ichido/pkg/idempotency"
)

// Middleware returns gin middleware that gives the handlers after it
// idempotency.Middleware's contract, with cfg as that function takes it. It is
// that middleware (one engine, the same answers), adapted to gin's chain by
// Adapt. Mount it after the authentication middleware, and read the user that
// middleware keeps in gin's context with SubjectFromKey or SubjectFrom.
// Middleware returns an error, and no middleware, when cfg is invalid.
func Middleware(cfg idempotency.Config) (gin.HandlerFunc, error) {
	if cfg.Subject == nil {
		return nil, errors.New("ginidem: invalid Config: Config.Subject is nil: a gin server has no API Gateway authorizer; read the user your authentication middleware set in gin's context (SubjectFromKey, SubjectFrom)")
	}
	mw, err := idempotency.Middleware(cfg)
	if err != nil {
		return nil, err
	}
	return Adapt(mw), nil
}

// Adapt returns mw, a middleware made by idempotency.Middleware, as gin
// middleware. The gin context is made reachable from the request's
// context, where SubjectFrom, SubjectFromKey and ParamKey find it.
//
// When mw runs the handlers after it, they run as gin's chain does (c.Next).
// c.Request is the request mw hands on. Its context carries
// idempotency.FromContext's Info, and is cancelled when the run's lease is
// lost. For a protected request, c.Writer is a gin.ResponseWriter over the
// response mw buffers. Headers, c.JSON, c.Status and aborts all land in the
// answer that is kept. When mw answers itself (a replay, a refusal), the rest
// of the chain is aborted. Either way c.Writer and c.Request are the outer ones
// again when the middleware returns, also when a handler panics. So gin's
// Recovery answers a panic on the real response, after the key is released.
func Adapt(mw func(http.Handler) http.Handler) gin.HandlerFunc {
	return func(c *gin.Context) {
		outerWriter, outerRequest := c.Writer, c.Request
		defer func() { c.Writer, c.Request = outerWriter, outerRequest }()
		ran := false
		next := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ran = true
			c.Request = r
			if _, passed := w.(gin.ResponseWriter); passed {
				// Not protected (a GET): mw handed on gin's own writer.
				c.Next()
				return
			}
			inner := &bufferWriter{ResponseWriter: w, size: noWritten, status: outerWriter.Status(), done: outerRequest.Context().Done()}
			c.Writer = inner
			c.Next()
			// What gin's engine does with its own writer once the chain
			// is done: a status set without a body is still sent.
			inner.WriteHeaderNow()
		})
		ctx := context.WithValue(outerRequest.Context(), contextKey{}, c)
		mw(next).ServeHTTP(outerWriter, outerRequest.WithContext(ctx))
		if !ran {
			c.Abort()
		}
	}
}

// contextKey is the request context's key of the gin context.
type contextKey struct{}

// errNoGinContext is returned when a request's context holds no gin
// context: the idempotency middleware was not mounted through this
// package.
var errNoGinContext = errors.New("ginidem: the request's context holds no gin context; mount the idempotency middleware with ginidem.Middleware or ginidem.Adapt")

// ginContext returns the gin context that Adapt put in ctx.
func ginContext(ctx context.Context) (*gin.Context, error) {
	c, ok := ctx.Value(contextKey{}).(*gin.Context)
	if !ok {
		return nil, errNoGinContext
	}
	return c, nil
}

// SubjectFromKey returns a Config.Subject that reads the user from gin's
// context, where an authentication middleware put it with c.Set(key, user). The
// user is a string, or a value whose String method gives the subject (a
// uuid.UUID). No value under key is no user (401 unauthenticated); a value of
// another type is an error, logged and answered with 401 as well (read such a
// value with SubjectFrom).
func SubjectFromKey(key any) idempotency.SubjectFunc {
	return func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := ginContext(ctx)
		if err != nil {
			return "", err
		}
		v, ok := c.Get(key)
		if !ok || v == nil {
			return "", nil
		}
		switch v := v.(type) {
		case string:
			return v, nil
		case fmt.Stringer:
			return v.String(), nil
		}
		return "", fmt.Errorf("ginidem: the value under the gin context key %v is a %T, not a string: read it with SubjectFrom", key, v)
	}
}

// SubjectFrom returns a Config.Subject that reads the user from gin's context
// through user. user is typically the authentication middleware's accessor. It
// returns "" when there is none, which is answered with 401.
func SubjectFrom(user func(c *gin.Context) string) idempotency.SubjectFunc {
	return func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := ginContext(ctx)
		if err != nil {
			return "", err
		}
		return user(c), nil
	}
}

// ParamKey returns a KeySource that reads the key from the path parameter
// name of gin's route ("/operations/:operation"). idempotency.PathKey
// reads API Gateway's and net/http's parameters, not gin's.
func ParamKey(name string) idempotency.KeySource {
	return idempotency.KeyFunc(func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := ginContext(ctx)
		if err != nil {
			return "", err
		}
		return c.Param(name), nil
	})
}
