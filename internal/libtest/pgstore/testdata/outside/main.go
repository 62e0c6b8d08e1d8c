// A program of its own, outside the ichido repository, that keeps its
// idempotency keys in its own database and schema: one call creates the key
// store (pgstore.Migrate), and idempotency.Wrap protects its handler with a
// user taken by a SubjectFunc of its own. It imports nothing of ichido but
// pkg/idempotency and one store package.
// TestProgramOutsideTheRepository builds and runs it.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func createOrder(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"order":"1"}`}, nil
}

// orderUser is the program's own SubjectFunc: its authorizer puts the user
// in a custom claim rather than "sub".
func orderUser(_ context.Context, req idempotency.Request) (string, error) {
	id := req.Claims["custom:account_id"]
	if id == "" {
		return "", errors.New("no account id claim")
	}
	return id, nil
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()

	// The one call: the key store in schema "orders_idempotency" of this
	// database, its purge scheduled with pg_cron wherever pg_cron lives.
	res, err := pgstore.Migrate(ctx, pool, &pgstore.MigrateOptions{Schema: "orders_idempotency"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("key store in schema %s, %d migrations applied\n", res.Schema, len(res.Applied))

	store, err := pgstore.New(pool, &pgstore.Options{Schema: res.Schema})
	if err != nil {
		log.Fatal(err)
	}
	handler, err := idempotency.Wrap(createOrder, idempotency.Config{Store: store, Subject: orderUser})
	if err != nil {
		log.Fatal(err)
	}
	req := events.APIGatewayV2HTTPRequest{
		RawPath: "/orders",
		Headers: map[string]string{"idempotency-key": "5f0c7a52-51d6-4a8e-9a43-1b2f4c1d2e3f"},
		Body:    `{"item":"tea"}`,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: "/orders"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
					Claims: map[string]string{"custom:account_id": "0d9f6b8e-3c1a-4f5e-8b7d-2a6c9e1f4b3d"},
				},
			},
		},
	}
	for range 2 {
		resp, err := handler(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}

	// Without the claim the request is refused with the decorator's code,
	// read through the library's own constants.
	req.RequestContext.Authorizer.JWT.Claims = map[string]string{"sub": "someone"}
	resp, err := handler(ctx, req)
	if err != nil {
		log.Fatal(err)
	}
	var answer struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal([]byte(resp.Body), &answer); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d %s unauthenticated=%t\n", resp.StatusCode, resp.Headers["Content-Type"], answer.Code == idempotency.CodeUnauthenticated)
}
