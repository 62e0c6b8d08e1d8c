package webhook_test

import (
	"bufio"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/webhook"
)

// bodySigners are the providers that sign the body and no delivery id,
// each with a signer of a given body under a given id.
var bodySigners = []struct {
	name   string
	sign   func(id, body string) delivery
	header string
}{
	{"github", func(id, body string) delivery {
		h := http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(hmacSHA256([]byte(githubSecret), body))}, "X-Github-Event": {"push"}}
		h.Set("X-GitHub-Delivery", id)
		return delivery{h, body}
	}, "X-GitHub-Delivery"},
	{"shopify", func(id, body string) delivery {
		h := http.Header{"X-Shopify-Hmac-Sha256": {base64.StdEncoding.EncodeToString(hmacSHA256([]byte(shopifySecret), body))}, "X-Shopify-Topic": {"orders/paid"}}
		h.Set("X-Shopify-Event-Id", id)
		h.Set("X-Shopify-Webhook-Id", id)
		return delivery{h, body}
	}, "X-Shopify-Event-Id"},
}

// bodyServer is an endpoint of provider on store whose handler answers
// with the digest of the body it ran on, and fails the first run of each
// body in failFirst.
type bodyServer struct {
	url  string
	runs atomic.Int32
	mu   sync.Mutex
	ran  map[string]int
}

func newBodyServer(t *testing.T, store adminStore, p webhook.Provider, failFirst ...string) *bodyServer {
	t.Helper()
	mw, err := webhook.Middleware(p, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}})
	require.NoError(t, err)
	bs := &bodyServer{ran: map[string]int{}}
	s := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		bs.runs.Add(1)
		bs.mu.Lock()
		bs.ran[string(body)]++
		n := bs.ran[string(body)]
		bs.mu.Unlock()
		for _, f := range failFirst {
			if f == string(body) && n == 1 {
				http.Error(w, "down", http.StatusServiceUnavailable)
				return
			}
		}
		sum := sha256.Sum256(body)
		fmt.Fprintf(w, `{"ran_on":%q}`, hex.EncodeToString(sum[:8]))
	})))
	t.Cleanup(s.Close)
	bs.url = s.URL
	return bs
}

func (bs *bodyServer) send(t *testing.T, d delivery) reply {
	t.Helper()
	return (&receiver{url: bs.url}).send(t, "/", d)
}

func ranOn(body string) string {
	sum := sha256.Sum256([]byte(body))
	return fmt.Sprintf(`{"ran_on":%q}`, hex.EncodeToString(sum[:8]))
}

// TestResentUnderNewIDRunsOnce sends one signed GitHub or Shopify body
// under four ids, as anyone holding a copy can: the handler runs once and
// the other three get its answer, on every store.
func TestResentUnderNewIDRunsOnce(t *testing.T) {
	t.Parallel()
	for _, b := range storekit.Backends() {
		for _, p := range bodySigners {
			t.Run(b.Name+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				bs := newBodyServer(t, b.New(t), preset(t, p.name))
				body := `{"ref":"refs/heads/main","after":"` + uuid.NewString() + `"}`
				for i := range 4 {
					r := bs.send(t, p.sign(uuid.NewString(), body))
					require.Equal(t, http.StatusOK, r.status, r.body)
					require.Equal(t, ranOn(body), r.body)
					require.Equal(t, i > 0, r.header.Get(idempotency.ReplayedHeader) == "true", "copy %d", i)
				}
				require.EqualValues(t, 1, bs.runs.Load(), "a delivery sent again under new %s ids runs once", p.header)
			})
		}
	}
}

// TestMovedBodyDoesNotAnswerAnotherEvent sends event A, then A's signed
// body under the id of event B, whose first attempt failed: B's retry
// still runs the handler on B's body, on every store.
func TestMovedBodyDoesNotAnswerAnotherEvent(t *testing.T) {
	t.Parallel()
	for _, b := range storekit.Backends() {
		for _, p := range bodySigners {
			t.Run(b.Name+"/"+p.name, func(t *testing.T) {
				t.Parallel()
				bodyA := `{"order":"A","n":"` + uuid.NewString() + `"}`
				bodyB := `{"order":"B","n":"` + uuid.NewString() + `"}`
				bs := newBodyServer(t, b.New(t), preset(t, p.name), bodyB)
				idA, idB := uuid.NewString(), uuid.NewString()

				require.Equal(t, http.StatusOK, bs.send(t, p.sign(idA, bodyA)).status)
				require.Equal(t, http.StatusServiceUnavailable, bs.send(t, p.sign(idB, bodyB)).status, "B's first attempt fails; the provider retries it under idB")

				moved := bs.send(t, p.sign(idB, bodyA))
				require.Equal(t, ranOn(bodyA), moved.body, "the moved copy is A's delivery")

				retry := bs.send(t, p.sign(idB, bodyB))
				require.Equal(t, http.StatusOK, retry.status, retry.body)
				require.Empty(t, retry.header.Get(idempotency.ReplayedHeader), "B is not answered with A's response")
				require.Equal(t, ranOn(bodyB), retry.body)
				bs.mu.Lock()
				defer bs.mu.Unlock()
				require.Equal(t, 1, bs.ran[bodyA], "A ran once")
				require.Equal(t, 2, bs.ran[bodyB], "B ran on its failed attempt and on its retry")
			})
		}
	}
}

// TestPresetsRefuseBadSecrets builds each preset with an empty or
// malformed secret: an error naming the provider and the secret.
func TestPresetsRefuseBadSecrets(t *testing.T) {
	t.Parallel()
	build := map[string]func(secret string) error{
		"Stripe":  func(s string) error { _, err := webhook.Stripe(s, nil); return err },
		"GitHub":  func(s string) error { _, err := webhook.GitHub(s); return err },
		"Shopify": func(s string) error { _, err := webhook.Shopify(s); return err },
		"Standard Webhooks": func(s string) error {
			_, err := webhook.StandardWebhooks(s, nil)
			return err
		},
	}
	bad := map[string][]string{
		"Stripe":            {"", "whsec_", "whsec_short", "sk_live_not_a_webhook_secret_at_all", "whsec_test_stripe_endpoint_secret\n"},
		"GitHub":            {"", "   ", "short", githubSecret + "\n", " " + githubSecret},
		"Shopify":           {"", "short", shopifySecret + "\n", "shopify app client secret"},
		"Standard Webhooks": {"", "whsec_", "whsec_" + base64.StdEncoding.EncodeToString([]byte("8 bytes!")), "whsec_not base64!"},
	}
	for name, secrets := range bad {
		for _, s := range secrets {
			err := build[name](s)
			require.Error(t, err, "%s(%q)", name, s)
			require.ErrorContains(t, err, name, "the error names the provider")
			require.ErrorContains(t, err, "secret", "the error names the setting")
		}
	}
	for name, s := range map[string]string{"Stripe": stripeSecret, "GitHub": githubSecret, "Shopify": shopifySecret, "Standard Webhooks": standardSecret} {
		require.NoError(t, build[name](s), name)
	}
}

// TestMiddlewareRefusesUntrustedProvider builds a Provider whose Verify
// accepts anything: Middleware refuses it.
func TestMiddlewareRefusesUntrustedProvider(t *testing.T) {
	t.Parallel()
	p := webhook.Provider{
		Name:   "acme",
		ID:     func(r *http.Request, _ []byte) string { return r.Header.Get("X-Acme-Id") },
		Verify: func(*http.Request, []byte) error { return nil },
	}
	_, err := webhook.Middleware(p, idempotency.Config{Store: newMem()})
	require.ErrorContains(t, err, "acme's Verify accepts a delivery with no signature")
	_, err = webhook.Middleware(webhook.Provider{}, idempotency.Config{Store: newMem()})
	require.ErrorContains(t, err, "Provider.Name", "the zero Provider of a preset whose error was dropped")
}

// TestMissingIDNamesProviderField sends a verified Stripe event without
// an "id": the refusal names Stripe's field, not a header.
func TestMissingIDNamesProviderField(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, preset(t, "stripe"))
	d := stripeDelivery("", timeNow(), stripeSecret)
	r := rc.send(t, "/stripe", d)
	requireProblem(t, r, http.StatusBadRequest, webhook.CodeDeliveryIDMissing)
	var p struct{ Title, Detail string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.NotContains(t, p.Title, "Idempotency-Key")
	require.NotContains(t, p.Detail, "Idempotency-Key")
	require.Contains(t, p.Detail, `"id"`)
	require.Contains(t, p.Detail, "stripe")
	require.Empty(t, rc.records(t))
	require.Zero(t, rc.runs.Load())
}

// TestUnverifiedWarningDefaultLogger leaves Settings.Logger unset and
// sends unverified deliveries at once: each warning is one JSON line on
// standard output, as the engine's lines are, and the logger is shared
// without a data race (run with -race). It swaps os.Stdout, so it is not
// parallel.
func TestUnverifiedWarningDefaultLogger(t *testing.T) {
	r, w, err := os.Pipe()
	require.NoError(t, err)
	stdout := os.Stdout
	os.Stdout = w
	mw, err := webhook.Middleware(preset(t, "github"), idempotency.Config{Store: newMem(), Settings: idempotency.Settings{Metrics: io.Discard}})
	os.Stdout = stdout
	require.NoError(t, err)
	h := mw(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { t.Error("an unverified delivery ran") }))

	const n = 8
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{}`))
			req.Header.Set("X-Hub-Signature-256", "sha256=00")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			require.Equal(t, http.StatusUnauthorized, rec.Code)
		})
	}
	wg.Wait()
	require.NoError(t, w.Close())
	lines := 0
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "a JSON line: %s", sc.Text())
		require.Equal(t, "WARN", line["level"])
		require.Equal(t, "webhook", line["msg"])
		require.Equal(t, "unverified", line["outcome"])
		lines++
	}
	require.Equal(t, n, lines, "one line per unverified delivery on standard output")
}
