package echoidem

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/ichido/ichido/pkg/idempotency"
)

// Middleware returns Echo middleware that gives the handlers after it
// idempotency.Middleware's contract, with cfg as that function takes it. It is
// that middleware (one engine, the same answers), adapted to Echo's chain by
// Adapt. Mount it after the authentication middleware, and read the user that
// middleware keeps in Echo's context with SubjectFromKey or SubjectFrom.
// Middleware returns an error, and no middleware, when cfg is invalid.
func Middleware(cfg idempotency.Config) (echo.MiddlewareFunc, error) {
	if cfg.Subject == nil {
		return nil, errors.New("echoidem: invalid Config: Config.Subject is nil: an Echo server has no API Gateway authorizer; read the user your authentication middleware set in Echo's context (SubjectFromKey, SubjectFrom)")
	}
	mw, err := idempotency.Middleware(cfg)
	if err != nil {
		return nil, err
	}
	return Adapt(mw), nil
}

// Adapt returns mw, a middleware made by idempotency.Middleware, as Echo
// middleware. The Echo context is made reachable from the request's
// context, where SubjectFrom, SubjectFromKey and ParamKey find it.
//
// When mw runs the handlers after it, c.Request() is the request mw hands on.
// Its context carries idempotency.FromContext's Info, and is cancelled when the
// run's lease is lost. For a protected request, c.Response() is an
// echo.Response over the response mw buffers. An error the handler returns is
// answered there by the Echo's HTTPErrorHandler (c.Error). So its answer is the
// one kept (a 4xx) or released (a 5xx). The error is returned as well, as
// Echo's own logger middleware does, for the middleware before this one to see.
// An error handler must therefore skip a committed response, as Echo's default
// one does. When mw answers itself (a replay, a refusal), the handlers after it
// do not run. Either way c.Response() and c.Request() are the outer ones again
// when the middleware returns, also when a handler panics. So Echo's Recover
// answers a panic on the real response, after the key is released.
func Adapt(mw func(http.Handler) http.Handler) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) (err error) {
			outerResponse, outerRequest := c.Response(), c.Request()
			defer func() {
				c.SetResponse(outerResponse)
				c.SetRequest(outerRequest)
			}()
			run := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				c.SetRequest(r)
				if res, passed := w.(*echo.Response); passed && res == outerResponse {
					// Not protected (a GET): mw handed on Echo's own response.
					err = next(c)
					return
				}
				c.SetResponse(echo.NewResponse(w, c.Echo()))
				if err = next(c); err != nil {
					c.Error(err)
				}
			})
			ctx := context.WithValue(outerRequest.Context(), contextKey{}, c)
			mw(run).ServeHTTP(outerResponse, outerRequest.WithContext(ctx))
			return err
		}
	}
}

// contextKey is the request context's key of the Echo context.
type contextKey struct{}

// errNoEchoContext is returned when a request's context holds no Echo
// context: the idempotency middleware was not mounted through this
// package.
var errNoEchoContext = errors.New("echoidem: the request's context holds no Echo context; mount the idempotency middleware with echoidem.Middleware or echoidem.Adapt")

// echoContext returns the Echo context that Adapt put in ctx.
func echoContext(ctx context.Context) (echo.Context, error) {
	c, ok := ctx.Value(contextKey{}).(echo.Context)
	if !ok {
		return nil, errNoEchoContext
	}
	return c, nil
}

// SubjectFromKey returns a Config.Subject that reads the user from Echo's
// context, where an authentication middleware put it with c.Set(key, user). The
// user is a string, or a value whose String method gives the subject (a
// uuid.UUID). No value under key is no user (401 unauthenticated). A value of
// another type, such as echo-jwt's *jwt.Token, is an error, logged and answered
// with 401 as well. Read such a value with SubjectFrom.
func SubjectFromKey(key string) idempotency.SubjectFunc {
	return func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := echoContext(ctx)
		if err != nil {
			return "", err
		}
		switch v := c.Get(key).(type) {
		case nil:
			return "", nil
		case string:
			return v, nil
		case fmt.Stringer:
			return v.String(), nil
		default:
			return "", fmt.Errorf("echoidem: the value under the Echo context key %q is a %T, not a string: read it with SubjectFrom", key, v)
		}
	}
}

// SubjectFrom returns a Config.Subject that reads the user from Echo's context
// through user. user is typically the authentication middleware's accessor. It
// returns "" when there is none, which is answered with 401.
func SubjectFrom(user func(c echo.Context) string) idempotency.SubjectFunc {
	return func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := echoContext(ctx)
		if err != nil {
			return "", err
		}
		return user(c), nil
	}
}

// ParamKey returns a KeySource that reads the key from the path parameter
// name of Echo's route ("/operations/:operation"). idempotency.PathKey
// reads API Gateway's and net/http's parameters, not Echo's.
func ParamKey(name string) idempotency.KeySource {
	return idempotency.KeyFunc(func(ctx context.Context, _ idempotency.Request) (string, error) {
		c, err := echoContext(ctx)
		if err != nil {
			return "", err
		}
		return c.Param(name), nil
	})
}
