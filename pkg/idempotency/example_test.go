package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// exampleStore stands in for a real Store such as pgstore.New(pool, nil).
func exampleStore() idemstore.Store { return newMemStore() }

// Wrapping an HTTP API (payload 2.0) handler. In a Lambda main the result
// goes to lambda.Start; the Logger and Metrics fields are left at their
// defaults (standard output) there and silenced here.
func ExampleWrap() {
	runs := 0
	createTask := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		info, _ := idempotency.FromContext(ctx) // the key, the user and the request hash
		return events.APIGatewayV2HTTPResponse{
			StatusCode: http.StatusCreated,
			Headers:    map[string]string{"Content-Type": "application/json", "Location": "/tasks/1"},
			Body:       fmt.Sprintf(`{"id":1,"key":%q}`, info.Key),
		}, nil
	}

	handler, err := idempotency.Wrap(createTask, idempotency.Config{
		Store: exampleStore(),
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err) // an invalid Config; in a main, return the error
	}

	req := events.APIGatewayV2HTTPRequest{
		RawPath: "/tasks",
		Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		Body:    `{"title":"write the docs"}`,
	}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"sub": "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"},
		},
	}

	for range 2 {
		resp, _ := handler(context.Background(), req)
		fmt.Printf("%d replayed=%s %s\n", resp.StatusCode, resp.Headers["Idempotent-Replayed"], resp.Body)
	}
	fmt.Println("runs:", runs)
	// Output:
	// 201 replayed= {"id":1,"key":"8e03978e-40d5-43e8-bc93-6894a57f9324"}
	// 201 replayed=true {"id":1,"key":"8e03978e-40d5-43e8-bc93-6894a57f9324"}
	// runs: 1
}

// Wrapping a REST API (payload 1.0) handler: the same Config, the other
// event types. A request without a key never reaches the handler.
func ExampleWrap_restAPI() {
	deleteTask := func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: http.StatusNoContent}, nil
	}
	handler, err := idempotency.Wrap(deleteTask, idempotency.Config{
		Store: exampleStore(),
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}

	req := events.APIGatewayProxyRequest{
		HTTPMethod: http.MethodDelete,
		Path:       "/tasks/42",
		RequestContext: events.APIGatewayProxyRequestContext{
			Authorizer: map[string]any{"claims": map[string]any{"sub": "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"}},
		},
	}
	resp, _ := handler(context.Background(), req)
	fmt.Println(resp.StatusCode, resp.Headers["Content-Type"])
	fmt.Println(resp.Body)

	// REST APIs may deliver the header in multiValueHeaders, and the IETF
	// draft's quoted form is accepted.
	req.MultiValueHeaders = map[string][]string{"Idempotency-Key": {`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}}
	for range 2 {
		resp, _ = handler(context.Background(), req)
		fmt.Printf("%d replayed=%s\n", resp.StatusCode, resp.Headers["Idempotent-Replayed"])
	}
	// Output:
	// 400 application/problem+json
	// {"type":"https://ichido.dev/problems/idempotency_key_missing","title":"Idempotency-Key header missing","status":400,"detail":"Send the Idempotency-Key header holding a new UUID version 4 with every DELETE request.","code":"idempotency_key_missing"}
	// 204 replayed=
	// 204 replayed=true
}

// A Lambda authorizer puts the user in its own context; name the field.
// A subject that is not a UUID is mapped to one (SubjectUUID).
func ExampleAuthorizerContextField() {
	cfg := idempotency.Config{
		Store:   exampleStore(),
		Subject: idempotency.AuthorizerContextField("userId"),
	}
	_, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{StatusCode: http.StatusOK}, nil
	}, cfg)
	fmt.Println(err)
	// Output: <nil>
}

// An invalid Config is refused with a message that names the field.
func ExampleConfig_invalid() {
	_, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{}, nil
	}, idempotency.Config{Methods: []string{"POST", "GET"}})
	fmt.Println(err)
	// Output:
	// idempotency: invalid Config: Config.Store is nil: pass a Store, e.g. pgstore.New(pool, nil)
	// Config.Methods holds GET, a safe method that always passes through; remove it
}
