package dynamostore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

// A Lambda main builds the client once, at cold start, from the function's
// role and region, and hands the store to the decorator. Check at start-up
// shows a missing table or grant before the first request.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), &dynamostore.Options{Table: os.Getenv("IDEMPOTENCY_TABLE")})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Check(ctx); err != nil {
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
		resp, err := handler(ctx, req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"id":"1"} replayed=""
	// 201 {"id":"1"} replayed="true"
}

// A table made by other means fits: here one with a sort key and other
// attribute names, shared by services through a key prefix.
func ExampleNew_ownTable() {
	store, err := dynamostore.New(dynamodb.New(dynamodb.Options{Region: "eu-west-1"}), &dynamostore.Options{
		Table:     "idempotency",
		KeyPrefix: "billing:",
		Names:     dynamostore.AttributeNames{PartitionKey: "pk", SortKey: "sk", Response: "data"},
	})
	if err != nil {
		log.Fatal(err)
	}
	key := store.Key("0b6a0ba4-5d2c-4a8b-9c36-1f6f6c1e2f3a", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	for _, name := range []string{"pk", "sk"} {
		fmt.Printf("%s = %s\n", name, key[name].(*types.AttributeValueMemberS).Value)
	}
	// Output:
	// pk = billing:0b6a0ba4-5d2c-4a8b-9c36-1f6f6c1e2f3a
	// sk = 8e03978e-40d5-43e8-bc93-6894a57f9324
}
