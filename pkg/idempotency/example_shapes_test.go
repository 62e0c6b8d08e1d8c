package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency"
)

var silent = slog.New(slog.NewJSONHandler(io.Discard, nil))

// Making any typed function idempotent: here a payment whose key is the
// order id, scoped per tenant. A repeat gets the first result back, decoded
// from the JSON it was stored as, without charging again.
func ExampleFunction() {
	type Charge struct {
		Tenant  string
		OrderID string
		Cents   int
	}
	type Receipt struct {
		PaymentID string `json:"payment_id"`
		Cents     int    `json:"cents"`
	}
	charges := 0
	charge := func(ctx context.Context, c Charge) (Receipt, error) {
		charges++
		return Receipt{PaymentID: fmt.Sprintf("pay-%d", charges), Cents: c.Cents}, nil
	}

	once, err := idempotency.Function(charge, idempotency.FunctionConfig[Charge]{
		Store: exampleStore(),
		Name:  "charge-order",
		Key:   func(_ context.Context, c Charge) (string, error) { return c.OrderID, nil },
		Scope: func(_ context.Context, c Charge) (string, error) { return c.Tenant, nil },
		Settings: idempotency.Settings{
			Logger:  silent,
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err) // an invalid FunctionConfig; in a main, return the error
	}

	for range 2 {
		r, err := once(context.Background(), Charge{Tenant: "acme", OrderID: "o-17", Cents: 1299})
		fmt.Println(r.PaymentID, r.Cents, err)
	}
	r, _ := once(context.Background(), Charge{Tenant: "globex", OrderID: "o-17", Cents: 500})
	fmt.Println(r.PaymentID, "(another tenant)")
	fmt.Println("charges:", charges)
	// Output:
	// pay-1 1299 <nil>
	// pay-1 1299 <nil>
	// pay-2 (another tenant)
	// charges: 2
}

// An SQS batch handler for an event source mapping with
// ReportBatchItemFailures: the failed record alone is retried, and records
// done before are skipped when SQS delivers them again.
func ExampleSQSHandler() {
	type TaskEvent struct {
		EventID string `json:"event_id"`
	}
	runs := map[string]int{}
	handler, err := idempotency.SQSHandler(func(ctx context.Context, m events.SQSMessage) error {
		runs[m.MessageId]++
		if strings.Contains(m.Body, "fail") && runs[m.MessageId] == 1 {
			return errors.New("downstream unavailable")
		}
		return nil
	}, idempotency.FunctionConfig[events.SQSMessage]{
		Store: exampleStore(),
		Name:  "record-activity",
		// The producer's event id, so that a resend under a new message id
		// is a repeat too. Without Key, the message id is the key.
		Key: idempotency.SQSBodyKey(func(e TaskEvent) string { return e.EventID }),
		Settings: idempotency.Settings{
			Logger:  silent,
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	record := func(id, body string) events.SQSMessage {
		return events.SQSMessage{MessageId: id, Body: body, EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:task-events"}
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		record("m1", `{"event_id":"e1"}`),
		record("m2", `{"event_id":"e2","note":"fail once"}`),
		record("m3", `{"event_id":"e1"}`), // a resend of e1
	}}
	for range 2 { // the batch, then SQS redelivering all of it
		resp, _ := handler(context.Background(), batch)
		fmt.Printf("failures: %v\n", resp.BatchItemFailures)
	}
	fmt.Println("runs:", runs["m1"], runs["m2"], runs["m3"])
	// Output:
	// failures: [{m2}]
	// failures: []
	// runs: 1 2 0
}

// Protecting a plain net/http server (the standard library's ServeMux
// here; chi and other routers mount it the same way) behind an
// authentication middleware that put the user into the request's context.
func ExampleMiddleware() {
	type userKey struct{}
	authenticate := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A real server verifies a token here.
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01")))
		})
	}
	protect, err := idempotency.Middleware(idempotency.Config{
		Store: exampleStore(),
		Subject: idempotency.ContextSubject(func(ctx context.Context) string {
			s, _ := ctx.Value(userKey{}).(string)
			return s
		}),
		Settings: idempotency.Settings{
			Logger:  silent,
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	runs := 0
	mux := http.NewServeMux()
	mux.Handle("POST /tasks", protect(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":%d}`, runs)
	})))
	server := httptest.NewServer(authenticate(mux))
	defer server.Close()

	for range 2 {
		req, _ := http.NewRequest(http.MethodPost, server.URL+"/tasks", strings.NewReader(`{"title":"x"}`))
		req.Header.Set("Idempotency-Key", "8e03978e-40d5-43e8-bc93-6894a57f9324")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Printf("%d replayed=%q %s\n", resp.StatusCode, resp.Header.Get("Idempotent-Replayed"), body)
	}
	// Output:
	// 201 replayed="" {"id":1}
	// 201 replayed="true" {"id":1}
}

// A Lambda Function URL with AuthType AWS_IAM: the signing principal owns
// the keys.
func ExampleWrap_functionURL() {
	handler, err := idempotency.Wrap(func(ctx context.Context, req events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		return events.LambdaFunctionURLResponse{StatusCode: http.StatusAccepted, Body: `{"job":"j-1"}`}, nil
	}, idempotency.Config{Store: exampleStore(), Subject: idempotency.IAMPrincipal, Settings: idempotency.Settings{Logger: silent, Metrics: io.Discard}})
	if err != nil {
		panic(err)
	}
	req := events.LambdaFunctionURLRequest{RawPath: "/jobs", Headers: map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{
		IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/Scheduler/run-1"},
	}
	for range 2 {
		resp, _ := handler(context.Background(), req)
		fmt.Println(resp.StatusCode, resp.Headers[idempotency.ReplayedHeader], resp.Body)
	}
	// Output:
	// 202  {"job":"j-1"}
	// 202 true {"job":"j-1"}
}

// An Application Load Balancer target behind a listener rule that
// authenticates users: the load balancer's signed x-amzn-oidc-data claims
// give the user once verified.
func ExampleWrap_alb() {
	verify := func(ctx context.Context, oidcData string) (string, error) {
		// A real verifier checks the ES256 signature with the load
		// balancer's regional public key, then returns the sub claim.
		return "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01", nil
	}
	handler, err := idempotency.Wrap(func(ctx context.Context, req events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		return events.ALBTargetGroupResponse{StatusCode: http.StatusCreated, StatusDescription: "201 Created", Body: `{"id":1}`}, nil
	}, idempotency.Config{Store: exampleStore(), Subject: idempotency.ALBOIDC(verify), Settings: idempotency.Settings{Logger: silent, Metrics: io.Discard}})
	if err != nil {
		panic(err)
	}
	req := events.ALBTargetGroupRequest{HTTPMethod: http.MethodPost, Path: "/tasks", Body: `{}`, Headers: map[string]string{
		"idempotency-key":             "8e03978e-40d5-43e8-bc93-6894a57f9324",
		idempotency.ALBOIDCDataHeader: "eyJ0eXAiOiJKV1Qi...",
	}}
	for range 2 {
		resp, _ := handler(context.Background(), req)
		fmt.Println(resp.StatusDescription, resp.Headers[idempotency.ReplayedHeader], resp.Body)
	}
	// Output:
	// 201 Created  {"id":1}
	// 201 Created true {"id":1}
}
