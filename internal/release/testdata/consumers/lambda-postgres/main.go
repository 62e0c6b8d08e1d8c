// A Lambda function behind API Gateway that keeps its idempotency records
// in PostgreSQL, reached through dbpool (RDS Proxy with IAM authentication
// on Lambda, a URL locally).
package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	cfg, err := dbpool.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	pool, err := dbpool.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	handler, err := idempotency.Wrap(createOrder, idempotency.Config{Store: store})
	if err != nil {
		return err
	}
	lambda.Start(handler)
	return nil
}

func createOrder(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	info, _ := idempotency.FromContext(ctx)
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusCreated,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       fmt.Sprintf(`{"key":%q}`, info.Key),
	}, nil
}
