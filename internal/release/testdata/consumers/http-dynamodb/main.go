// A net/http server whose idempotency records live in DynamoDB.
package main

import (
	"context"
	"log"
	"net/http"
	"os"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

type userKey struct{}

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), &dynamostore.Options{Table: os.Getenv("IDEMPOTENCY_TABLE")})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := idempotency.Middleware(idempotency.Config{
		Store: store,
		Subject: idempotency.ContextSubject(func(ctx context.Context) string {
			user, _ := ctx.Value(userKey{}).(string)
			return user
		}),
	})
	if err != nil {
		log.Fatal(err)
	}
	orders := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"id":1}`))
	})
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") == "Bearer alice-token" {
				r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
			}
			next.ServeHTTP(w, r)
		})
	}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", authenticate(mw(orders)))
	log.Fatal(http.ListenAndServe(":8080", mux))
}
