package ginidem_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// A gin router whose authentication middleware keeps the user in gin's
// context: SubjectFromKey reads it there, and a retry gets the first answer.
func Example() {
	r := gin.New()
	r.Use(func(c *gin.Context) { // stands in for the authentication middleware
		if token := c.GetHeader("Authorization"); token == "Bearer alice-token" {
			c.Set("user", "alice")
		}
	})
	mw, err := ginidem.Middleware(idempotency.Config{
		Store:   memstore.New(),
		Subject: ginidem.SubjectFromKey("user"),
		Settings: idempotency.Settings{ // no log and metric lines in this example
			Logger:  slog.New(slog.DiscardHandler),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	r.Use(mw)
	created := 0
	r.POST("/tasks", func(c *gin.Context) {
		created++
		c.JSON(http.StatusCreated, gin.H{"id": created})
	})

	send := func(token string) {
		req := httptest.NewRequest(http.MethodPost, "/tasks", strings.NewReader(`{"title":"write tests"}`))
		req.Header.Set("Authorization", token)
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		w := httptest.NewRecorder()
		r.ServeHTTP(w, req)
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
