// An Echo API and a Connect service in one server, with records in memory
// (a single process, as in development).
package main

import (
	"context"
	"log"
	"net/http"

	"connectrpc.com/connect"
	"github.com/labstack/echo/v4"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/echoidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

type userKey struct{}

func main() {
	store := memstore.New()

	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // the authentication middleware
		return func(c echo.Context) error {
			if c.Request().Header.Get("Authorization") == "Bearer alice-token" {
				c.Set("user", "alice")
			}
			return next(c)
		}
	})
	mw, err := echoidem.Middleware(idempotency.Config{Store: store, Subject: echoidem.SubjectFromKey("user")})
	if err != nil {
		log.Fatal(err)
	}
	e.Use(mw)
	e.POST("/orders", func(c echo.Context) error { return c.JSON(http.StatusCreated, map[string]int{"id": 1}) })

	idem, err := connectidem.NewInterceptor(connectidem.Config{
		Store: store,
		Subject: func(ctx context.Context) (string, error) {
			user, _ := ctx.Value(userKey{}).(string)
			return user, nil
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	var runs int64
	next := func(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
		runs++
		return connect.NewResponse(wrapperspb.Int64(runs)), nil
	}
	authenticate := func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer alice-token" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
			}
			h.ServeHTTP(w, r)
		})
	}
	e.Any("/example.Counter/Next", echo.WrapHandler(authenticate(connect.NewUnaryHandler("/example.Counter/Next", next, connect.WithInterceptors(idem)))))
	log.Fatal(e.Start(":8080"))
}
