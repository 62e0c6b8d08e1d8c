package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// quiet silences a Config's log and metric lines, which go to standard
// output by default.
func quietConfig(cfg idempotency.Config) idempotency.Config {
	cfg.Logger, cfg.Metrics = slog.New(slog.NewJSONHandler(io.Discard, nil)), io.Discard
	return cfg
}

// v2Post is an HTTP API POST from the JWT subject sub.
func v2Post(path, sub string, headers map[string]string, body string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{RawPath: path, Headers: headers, Body: body}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": sub}},
	}
	return req
}

// countingCreate answers 201 with a body that counts its runs.
func countingCreate(runs *int) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		*runs++
		return events.APIGatewayV2HTTPResponse{
			StatusCode: http.StatusCreated,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       fmt.Sprintf(`{"run":%d}`, *runs),
		}, nil
	}
}

// Any identity provider's subject owns keys: a Cognito sub (a UUID) is its
// own user id, any other subject gets a name-based UUID, the same one every
// time. A program whose own tables key on the user calls SubjectUUID too.
func ExampleSubjectUUID() {
	fmt.Println(idempotency.SubjectUUID("5F0C7D2E-0C1A-4C3B-9A57-2F1E6F2B9D01"))
	fmt.Println(idempotency.SubjectUUID("auth0|6543210fedcba"))
	fmt.Println(idempotency.SubjectUUID("auth0|6543210fedcba"))
	fmt.Println(idempotency.SubjectUUID("google-oauth2|110169484474386276334"))
	// Output:
	// 5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01
	// 2c47f4a4-3794-5908-827c-25b3b6db5e9d
	// 2c47f4a4-3794-5908-827c-25b3b6db5e9d
	// 12e6da41-082a-5af4-80fc-f93559f1a764
}

// Keys in Stripe's format (any 1–255 visible ASCII characters) in the
// header X-Idempotency-Key; the refusal says what is wrong.
func ExampleConfig_keyFormat() {
	runs := 0
	h, err := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{
		Store:     memstore.New(),
		Key:       idempotency.HeaderKey("X-Idempotency-Key"),
		KeyFormat: idempotency.KeyOpaque,
	}))
	if err != nil {
		panic(err)
	}
	for _, key := range []string{"order-1842/charge", `"order-1842/charge"`, `"order 1842"`} {
		resp, _ := h(context.Background(), v2Post("/charges", "auth0|6543210fedcba", map[string]string{"x-idempotency-key": key}, `{"amount":1200}`))
		fmt.Printf("%d replayed=%s %s\n", resp.StatusCode, resp.Headers[idempotency.ReplayedHeader], resp.Body)
	}
	// Output:
	// 201 replayed= {"run":1}
	// 201 replayed=true {"run":1}
	// 400 replayed= {"type":"https://ichido.dev/problems/idempotency_key_invalid","title":"Idempotency-Key header invalid","status":400,"detail":"The X-Idempotency-Key header holds a character that is not visible ASCII: it must hold exactly one key of 1 to 255 visible ASCII characters, bare or as a quoted string.","code":"idempotency_key_invalid"}
}

// Keys optional, as in Powertools and Stripe: a request without one runs
// unprotected (logged and counted as "unprotected"); one with a key is
// protected as always.
func ExampleConfig_allowMissingKey() {
	runs := 0
	h, _ := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{Store: memstore.New(), Settings: idempotency.Settings{AllowMissingKey: true}}))
	sub := "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"
	for _, headers := range []map[string]string{{}, {}, {"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, {"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}} {
		resp, _ := h(context.Background(), v2Post("/tasks", sub, headers, `{}`))
		fmt.Printf("%d %s replayed=%s\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"run":1} replayed=
	// 201 {"run":2} replayed=
	// 201 {"run":3} replayed=
	// 201 {"run":3} replayed=true
}

// The key from a body field and a fingerprint of the parts that matter:
// Powertools' event_key_jmespath and payload_validation_jmespath, typed. A
// retry whose note differs replays; another amount under the same key is
// refused with 422.
func ExampleBodyKey() {
	type charge struct {
		OrderID string `json:"order_id"`
		Amount  int    `json:"amount"`
		Note    string `json:"note"`
	}
	runs := 0
	h, _ := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{
		Store:       memstore.New(),
		KeyFormat:   idempotency.KeyOpaque,
		Key:         idempotency.BodyKey(func(c charge) string { return c.OrderID }),
		Fingerprint: idempotency.FingerprintBody(func(c charge) any { return c.Amount }),
	}))
	for _, body := range []string{
		`{"order_id":"ord-1842","amount":1200,"note":"first"}`,
		`{"note":"retried","amount":1200,"order_id":"ord-1842"}`,
		`{"order_id":"ord-1842","amount":999}`,
		`{"amount":1200}`,
	} {
		resp, _ := h(context.Background(), v2Post("/charges", "auth0|6543210fedcba", nil, body))
		fmt.Printf("%d replayed=%s\n", resp.StatusCode, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 replayed=
	// 201 replayed=true
	// 422 replayed=
	// 400 replayed=
}

// The replay hook (Powertools' responseHook): called on every replay with
// the stored response and the record's times; here it says how old the
// answer is and when the key can be used again.
func ExampleConfig_onReplay() {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	runs := 0
	h, _ := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{
		Store: memstore.New(),
		Settings: idempotency.Settings{
			Clock: func() time.Time { return now },
			OnReplay: func(ctx context.Context, r *idempotency.Replay) {
				r.Header.Set("Age", fmt.Sprint(int(now.Sub(r.CreatedAt).Seconds())))
				r.Header.Set("X-Idempotency-Expires", r.ExpiresAt.Format(time.RFC3339))
			},
		},
	}))
	req := v2Post("/tasks", "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01", map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, `{}`)
	h(context.Background(), req)
	now = now.Add(90 * time.Second)
	resp, _ := h(context.Background(), req)
	fmt.Println(resp.StatusCode, resp.Body, resp.Headers["Age"], resp.Headers["X-Idempotency-Expires"])
	// Output:
	// 201 {"run":1} 90 2026-03-02T09:00:00Z
}

// Two services share one table (or one Redis) without sharing keys: the
// same key under two prefixes is two records. HTTPRecordID and
// FunctionRecordID name a record as the stores keep it, for an operator
// (cmd/keystore get) or a test.
func ExampleConfig_keyPrefix() {
	store := memstore.New()
	runs := 0
	orders, _ := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{Store: store, Settings: idempotency.Settings{KeyPrefix: "orders"}}))
	billing, _ := idempotency.Wrap(countingCreate(&runs), quietConfig(idempotency.Config{Store: store, Settings: idempotency.Settings{KeyPrefix: "billing"}}))
	sub, key := "auth0|6543210fedcba", "8e03978e-40d5-43e8-bc93-6894a57f9324"
	req := v2Post("/tasks", sub, map[string]string{"idempotency-key": key}, `{}`)
	a, _ := orders(context.Background(), req)
	b, _ := billing(context.Background(), req)
	fmt.Println(a.Body, b.Body)

	user, recordKey, _ := idempotency.HTTPRecordID("orders", idempotency.KeyUUIDv4, sub, key)
	rec, found, _ := store.Get(context.Background(), user, recordKey)
	fmt.Println(found, rec.Status, rec.Response.Body)
	fnUser, fnKey, _ := idempotency.FunctionRecordID("", "charge-order", "", "ord-1842")
	fmt.Println(fnUser, fnKey)
	// Output:
	// {"run":1} {"run":2}
	// true completed {"run":1}
	// 4e860ed1-ded9-8787-90c0-f31f9327839f 5163f5a0-ff06-8679-a8ac-2e86e510330a
}

// The same options for a typed function (and an SQSHandler): a key prefix
// per service, calls without a key run unprotected, and a hook sees every
// repeat answered from a stored result. FunctionRecordID names a call's
// record as the store keeps it.
func ExampleFunctionConfig_options() {
	type order struct{ ID string }
	runs := 0
	charge, err := idempotency.Function(func(ctx context.Context, o order) (string, error) {
		runs++
		return fmt.Sprintf("charged %s (run %d)", o.ID, runs), nil
	}, idempotency.FunctionConfig[order]{
		Store: memstore.New(),
		Name:  "charge-order",
		Key:   func(_ context.Context, o order) (string, error) { return o.ID, nil },
		Settings: idempotency.Settings{
			KeyPrefix:       "billing",
			AllowMissingKey: true,
			OnReplay: func(_ context.Context, r *idempotency.Replay) {
				fmt.Println("replayed", r.Key, r.Response.Body)
			},
			Logger:  slog.New(slog.NewJSONHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		panic(err)
	}
	for _, o := range []order{{"ord-1842"}, {"ord-1842"}, {""}, {""}} {
		out, _ := charge(context.Background(), o)
		fmt.Println(out)
	}
	user, key, _ := idempotency.FunctionRecordID("billing", "charge-order", "", "ord-1842")
	fmt.Println(user, key)
	// Output:
	// charged ord-1842 (run 1)
	// replayed ord-1842 "charged ord-1842 (run 1)"
	// charged ord-1842 (run 1)
	// charged  (run 2)
	// charged  (run 3)
	// 35f7ab5f-17b8-8b08-98aa-b470afd6433b 5163f5a0-ff06-8679-a8ac-2e86e510330a
}
