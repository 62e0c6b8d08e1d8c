package redisstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// A Lambda main builds the client once, at cold start, from REDIS_URL
// (rediss:// for ElastiCache Serverless; plain redis:// only on loopback),
// and hands the store to the decorator in place of the PostgreSQL one.
func ExampleNew() {
	client, err := redisstore.ClientFromEnv(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	store, err := redisstore.New(client, nil)
	if err != nil {
		log.Fatal(err)
	}

	createTask := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"id":"1"}`}, nil
	}
	handler, err := idempotency.Wrap(createTask, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}})
	if err != nil {
		log.Fatal(err)
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Body: `{"title":"tea"}`,
		Headers: map[string]string{"idempotency-key": uuid.NewString()}}
	req.RequestContext.HTTP.Method = "POST"
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": uuid.NewString()}},
	}
	for range 2 { // a request and its retry
		resp, err := handler(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"id":"1"} replayed=""
	// 201 {"id":"1"} replayed="true"
}

func ExampleClientFromEnv_plainTextRefused() {
	_, err := redisstore.ClientFromEnv(func(string) string { return "redis://cache.internal:6379" })
	fmt.Println(err)
	// Output: redisstore: bad Redis configuration: REDIS_URL uses redis:// (plain text) for the non-loopback host "cache.internal"; use rediss:// (TLS), which ElastiCache Serverless requires
}
