package memstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// A unit test of a wrapped handler needs no server: memstore.New is the
// store, and the records the handler left can be looked at.
func ExampleNew() {
	runs := 0
	createOrder := func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: `{"id":"ord-1"}`}, nil
	}
	store := memstore.New()
	h, err := idempotency.Wrap(createOrder, idempotency.Config{
		Store: store,
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}

	req := events.APIGatewayV2HTTPRequest{RawPath: "/orders", Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "auth0|6543210fedcba"}},
	}
	for range 2 {
		resp, _ := h(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Headers[idempotency.ReplayedHeader] == "true")
	}
	records, _ := store.List(context.Background(), idemstore.ListQuery{UserID: idempotency.SubjectUUID("auth0|6543210fedcba")})
	fmt.Println("runs:", runs, "records:", len(records), records[0].Status)
	// Output:
	// 201 false
	// 201 true
	// runs: 1 records: 1 completed
}
