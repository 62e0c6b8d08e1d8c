package echoidem_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/echoidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// An Echo router whose authentication middleware keeps the user in Echo's
// context: SubjectFromKey reads it there, and a retry gets the first answer.
func Example() {
	e := echo.New()
	e.Use(func(next echo.HandlerFunc) echo.HandlerFunc { // stands in for the authentication middleware
		return func(c echo.Context) error {
			if c.Request().Header.Get("Authorization") == "Bearer alice-token" {
				c.Set("user", "alice")
			}
			return next(c)
		}
	})
	mw, err := echoidem.Middleware(idempotency.Config{
		Store:   memstore.New(),
		Subject: echoidem.SubjectFromKey("user"),
		Settings: idempotency.Settings{ // no log and metric lines in this example
			Logger:  slog.New(slog.DiscardHandler),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	e.Use(mw)
	created := 0
	e.POST("/tasks", func(c echo.Context) error {
		created++
		return c.JSON(http.StatusCreated, map[string]int{"id": created})
	})

	send := func(token string) {
		req := httptest.NewRequest(http.MethodPost, "/tasks", strings.NewReader(`{"title":"write tests"}`))
		req.Header.Set("Authorization", token)
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		e.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
	}
	send("Bearer alice-token")
	send("Bearer alice-token") // the retry
	send("")                   // no user
	// Output:
	// 201  {"id":1}
	// 201 true {"id":1}
	// 401  {"type":"https://ichido.dev/problems/unauthenticated","title":"Unauthenticated","status":401,"detail":"The request carries no authenticated user.","code":"unauthenticated"}
}
