package webhook_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/webhook"
)

// A GitHub webhook receiver: the delivery runs once, its redelivery gets the
// first answer, and a delivery that is not GitHub's never reaches the
// handler or the store.
func Example() {
	const secret = "the webhook's secret"
	github, err := webhook.GitHub(secret)
	if err != nil {
		fmt.Println(err) // an empty or malformed secret
		return
	}
	mw, err := webhook.Middleware(github, idempotency.Config{
		Store: memstore.New(),
		Settings: idempotency.Settings{ // no log and metric lines in this example
			Logger:  slog.New(slog.DiscardHandler),
			Metrics: io.Discard,
		},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	handled := 0
	receiver := mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handled++
		fmt.Fprintf(w, "handled %d\n", handled)
	}))

	deliver := func(signedWith string) {
		body := `{"action":"opened","number":1}`
		mac := hmac.New(sha256.New, []byte(signedWith))
		mac.Write([]byte(body))
		req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		req.Header.Set("X-GitHub-Delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		w := httptest.NewRecorder()
		receiver.ServeHTTP(w, req)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(w.Body.String()))
	}
	deliver(secret)
	deliver(secret) // a redelivery
	deliver("someone else's secret")

	_, err = webhook.GitHub("") // an unset variable
	fmt.Println(err)
	// Output:
	// 200  handled 1
	// 200 true handled 1
	// 401  {"type":"https://ichido.dev/problems/webhook_signature_invalid","title":"Webhook signature invalid","status":401,"detail":"The delivery's signature could not be verified.","code":"webhook_signature_invalid"}
	// webhook: the GitHub secret (the webhook's secret) is empty; an empty key verifies a delivery anyone can sign
}
