package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/webhook"
)

// The tests sign deliveries themselves, each as its provider documents it,
// so that the package's verifiers are checked against a second
// implementation (and, below, against published vectors).

func hmacSHA256(key []byte, msg string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(msg))
	return h.Sum(nil)
}

const (
	stripeSecret   = "whsec_test_stripe_endpoint_secret"
	githubSecret   = "It's a Secret to Everybody"
	shopifySecret  = "shopify-app-client-secret"
	standardSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)

// must returns a preset built with a valid secret.
func must(p webhook.Provider, err error) webhook.Provider {
	if err != nil {
		panic(err)
	}
	return p
}

// delivery is a request a provider would send.
type delivery struct {
	header http.Header
	body   string
}

func stripeDelivery(id string, at time.Time, secret string) delivery {
	body := fmt.Sprintf(`{"id":%q,"object":"event","type":"payment_intent.succeeded","pending_webhooks":%d}`, id, at.Unix()%7)
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := hex.EncodeToString(hmacSHA256([]byte(secret), ts+"."+body))
	return delivery{http.Header{"Stripe-Signature": {"t=" + ts + ",v1=" + sig + ",v0=00"}}, body}
}

func githubDelivery(id, secret string) delivery {
	body := `{"action":"opened","number":1}`
	h := http.Header{"X-Hub-Signature-256": {"sha256=" + hex.EncodeToString(hmacSHA256([]byte(secret), body))}, "X-Github-Event": {"pull_request"}}
	if id != "" {
		h.Set("X-GitHub-Delivery", id)
	}
	return delivery{h, body}
}

func shopifyDelivery(id, secret string) delivery {
	body := `{"id":820982911946154508,"email":"jon@example.com"}`
	h := http.Header{"X-Shopify-Hmac-Sha256": {base64.StdEncoding.EncodeToString(hmacSHA256([]byte(secret), body))}, "X-Shopify-Topic": {"orders/create"}}
	if id != "" {
		h.Set("X-Shopify-Event-Id", id)
	}
	return delivery{h, body}
}

func standardDelivery(t *testing.T, id string, at time.Time, secret string) delivery {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	body := `{"type":"invoice.paid","data":{"id":"inv_1"}}`
	ts := strconv.FormatInt(at.Unix(), 10)
	sig := base64.StdEncoding.EncodeToString(hmacSHA256(key, id+"."+ts+"."+body))
	return delivery{http.Header{"Webhook-Id": {id}, "Webhook-Timestamp": {ts}, "Webhook-Signature": {"v1a,bm90IGNoZWNrZWQ= v1," + sig}}, body}
}

// receiver is a webhook endpoint on a store, over real HTTP.
type receiver struct {
	url   string
	store adminStore
	runs  atomic.Int32
}

// newReceiver mounts each provider's middleware at /<name> on one store.
func newReceiver(t *testing.T, providers ...webhook.Provider) *receiver {
	t.Helper()
	return newReceiverOn(t, memstore.New(), providers...)
}

// newReceiverOn is newReceiver on store.
func newReceiverOn(t *testing.T, store adminStore, providers ...webhook.Provider) *receiver {
	t.Helper()
	rc := &receiver{store: store}
	mux := http.NewServeMux()
	for _, p := range providers {
		mw, err := webhook.Middleware(p, idempotency.Config{Store: rc.store, Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}})
		require.NoError(t, err)
		mux.Handle("POST /"+p.Name, mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(r.Body)
			require.NoError(t, err)
			n := rc.runs.Add(1)
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"handled":%d,"bytes":%d}`, n, len(body))
		})))
	}
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	rc.url = s.URL
	return rc
}

type reply struct {
	status int
	header http.Header
	body   string
}

func (rc *receiver) send(t *testing.T, path string, d delivery) reply {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, rc.url+path, strings.NewReader(d.body))
	require.NoError(t, err)
	req.Header = d.header.Clone()
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

func (rc *receiver) records(t *testing.T) []idemstore.Record {
	t.Helper()
	recs, err := rc.store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	return recs
}

func requireProblem(t *testing.T, r reply, status int, code string) {
	t.Helper()
	require.Equal(t, status, r.status, r.body)
	require.Equal(t, idempotency.ProblemContentType, r.header.Get("Content-Type"))
	var p struct{ Code string }
	require.NoError(t, json.Unmarshal([]byte(r.body), &p))
	require.Equal(t, code, p.Code)
}

// TestProviders runs each provider's deliveries through its middleware:
// a redelivery replays, an unverified delivery touches nothing, a delivery
// without an id is refused.
func TestProviders(t *testing.T) {
	t.Parallel()
	standard, err := webhook.StandardWebhooks(standardSecret, nil)
	require.NoError(t, err)
	cases := []struct {
		provider   webhook.Provider
		sign       func(t *testing.T, id, secret string) delivery
		secret     string
		noIDStatus int
		noIDCode   string
	}{
		{must(webhook.Stripe(stripeSecret, nil)), func(_ *testing.T, id, secret string) delivery {
			return stripeDelivery(id, time.Now(), secret)
		}, stripeSecret, http.StatusBadRequest, webhook.CodeDeliveryIDMissing},
		// GitHub and Shopify sign no id: the body is the key, and a
		// delivery without an id header is keyed all the same.
		{must(webhook.GitHub(githubSecret)), func(_ *testing.T, id, secret string) delivery {
			return githubDelivery(id, secret)
		}, githubSecret, 0, ""},
		{must(webhook.Shopify(shopifySecret)), func(_ *testing.T, id, secret string) delivery {
			return shopifyDelivery(id, secret)
		}, shopifySecret, 0, ""},
		// Standard Webhooks signs the id: a delivery without one cannot verify.
		{standard, func(t *testing.T, id, secret string) delivery {
			return standardDelivery(t, id, time.Now(), secret)
		}, standardSecret, http.StatusUnauthorized, webhook.CodeSignatureInvalid},
	}
	for _, b := range storekit.Backends() {
		for _, c := range cases {
			t.Run(b.Name+"/"+c.provider.Name, func(t *testing.T) {
				t.Parallel()
				rc := newReceiverOn(t, b.New(t), c.provider)
				path := "/" + c.provider.Name
				forged := "whsec_" + base64.StdEncoding.EncodeToString([]byte("not the endpoint's secret"))

				unverified := rc.send(t, path, c.sign(t, "evt_"+uuid.NewString(), forged))
				requireProblem(t, unverified, http.StatusUnauthorized, webhook.CodeSignatureInvalid)
				unsigned := c.sign(t, "evt_"+uuid.NewString(), c.secret)
				unsigned.header = http.Header{}
				requireProblem(t, rc.send(t, path, unsigned), http.StatusUnauthorized, webhook.CodeSignatureInvalid)
				require.Empty(t, rc.records(t), "an unverified delivery writes nothing")
				require.Zero(t, rc.runs.Load())

				if c.noIDStatus != 0 {
					requireProblem(t, rc.send(t, path, c.sign(t, "", c.secret)), c.noIDStatus, c.noIDCode)
					require.Empty(t, rc.records(t), "a delivery without an id writes nothing")
					require.Zero(t, rc.runs.Load())
				}

				id := "evt_" + uuid.NewString()
				first := rc.send(t, path, c.sign(t, id, c.secret))
				require.Equal(t, http.StatusOK, first.status, first.body)
				require.Empty(t, first.header.Get(idempotency.ReplayedHeader))
				time.Sleep(time.Second) // a retry signs another timestamp (Stripe, Standard Webhooks)
				retry := rc.send(t, path, c.sign(t, id, c.secret))
				require.Equal(t, http.StatusOK, retry.status)
				require.Equal(t, first.body, retry.body, "a redelivery gets the first answer")
				require.Equal(t, "true", retry.header.Get(idempotency.ReplayedHeader))
				require.EqualValues(t, 1, rc.runs.Load(), "the handler ran once")

				recs := rc.records(t)
				require.Len(t, recs, 1)
				require.Equal(t, idempotency.SubjectUUID(webhook.ProviderSubject(c.provider.Name)), recs[0].UserID, "the provider is the records' user")
				require.Equal(t, idemstore.StatusCompleted, recs[0].Status)
				ttl := recs[0].ExpiresAt.Sub(recs[0].CreatedAt)
				require.InDelta(t, webhook.DefaultTTL.Seconds(), ttl.Seconds(), 60, "records live DefaultTTL")
			})
		}
	}
}

// TestTwoProvidersSameID sends one id from GitHub and from Shopify: two
// records, the handler runs for each.
func TestTwoProvidersSameID(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, must(webhook.GitHub(githubSecret)), must(webhook.Shopify(shopifySecret)))
	id := uuid.NewString()
	require.Equal(t, http.StatusOK, rc.send(t, "/github", githubDelivery(id, githubSecret)).status)
	shop := rc.send(t, "/shopify", shopifyDelivery(id, shopifySecret))
	require.Equal(t, http.StatusOK, shop.status)
	require.Empty(t, shop.header.Get(idempotency.ReplayedHeader), "another provider's equal id is another delivery")
	require.EqualValues(t, 2, rc.runs.Load())
	recs := rc.records(t)
	require.Len(t, recs, 2)
	require.NotEqual(t, recs[0].UserID, recs[1].UserID)

	// A second endpoint of one provider, named apart, is a scope of its own.
	other := must(webhook.GitHub(githubSecret))
	other.Name = "github-org"
	rc2 := newReceiver(t, must(webhook.GitHub(githubSecret)), other)
	require.Equal(t, http.StatusOK, rc2.send(t, "/github", githubDelivery(id, githubSecret)).status)
	require.Empty(t, rc2.send(t, "/github-org", githubDelivery(id, githubSecret)).header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 2, rc2.runs.Load())
}

// TestHandlerFailureReleases checks that a 5xx releases the delivery, so
// that the provider's retry runs the handler again.
func TestHandlerFailureReleases(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	mw, err := webhook.Middleware(must(webhook.GitHub(githubSecret)), idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}})
	require.NoError(t, err)
	var runs atomic.Int32
	s := httptest.NewServer(mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			http.Error(w, "database down", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})))
	t.Cleanup(s.Close)
	rc := &receiver{url: s.URL, store: st}
	d := githubDelivery(uuid.NewString(), githubSecret)
	require.Equal(t, http.StatusServiceUnavailable, rc.send(t, "/", d).status)
	require.Empty(t, rc.records(t))
	require.Equal(t, http.StatusNoContent, rc.send(t, "/", d).status)
	require.Equal(t, "true", rc.send(t, "/", d).header.Get(idempotency.ReplayedHeader))
	require.EqualValues(t, 2, runs.Load())
}

// TestTimestampTolerance refuses a Stripe or Standard Webhooks delivery
// signed too long ago, or too far ahead.
func TestTimestampTolerance(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_700_000_000, 0)
	opts := &webhook.Options{Clock: func() time.Time { return now }}
	standard, err := webhook.StandardWebhooks(standardSecret, opts)
	require.NoError(t, err)
	stripe := must(webhook.Stripe(stripeSecret, opts))
	for _, skew := range []time.Duration{-6 * time.Minute, 6 * time.Minute} {
		d := stripeDelivery("evt_1", now.Add(skew), stripeSecret)
		require.ErrorIs(t, stripe.Verify(request(d), []byte(d.body)), webhook.ErrSignature, skew)
		d = standardDelivery(t, "msg_1", now.Add(skew), standardSecret)
		require.ErrorIs(t, standard.Verify(request(d), []byte(d.body)), webhook.ErrSignature, skew)
	}
	for _, skew := range []time.Duration{-4 * time.Minute, 4 * time.Minute} {
		d := stripeDelivery("evt_1", now.Add(skew), stripeSecret)
		require.NoError(t, stripe.Verify(request(d), []byte(d.body)), skew)
		d = standardDelivery(t, "msg_1", now.Add(skew), standardSecret)
		require.NoError(t, standard.Verify(request(d), []byte(d.body)), skew)
	}
}

func request(d delivery) *http.Request {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(d.body))
	r.Header = d.header.Clone()
	return r
}

// TestPublishedVectors checks the verifiers against the vectors the
// providers publish.
func TestPublishedVectors(t *testing.T) {
	t.Parallel()
	// GitHub's documentation: secret "It's a Secret to Everybody", payload
	// "Hello, World!".
	gh := request(delivery{http.Header{"X-Hub-Signature-256": {"sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"}}, "Hello, World!"})
	github := must(webhook.GitHub("It's a Secret to Everybody"))
	require.NoError(t, github.Verify(gh, []byte("Hello, World!")))
	require.ErrorIs(t, github.Verify(gh, []byte("Hello, World?")), webhook.ErrSignature)

	// The Standard Webhooks reference libraries' signing vector.
	at := time.Unix(1614265330, 0)
	standard, err := webhook.StandardWebhooks("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", &webhook.Options{Clock: func() time.Time { return at }})
	require.NoError(t, err)
	sw := request(delivery{http.Header{"Webhook-Id": {"msg_p5jXN8AQM9LWM0D4loKWxJek"}, "Webhook-Timestamp": {"1614265330"}, "Webhook-Signature": {"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="}}, `{"test": 2432232314}`})
	require.NoError(t, standard.Verify(sw, []byte(`{"test": 2432232314}`)))
	require.ErrorIs(t, standard.Verify(sw, []byte(`{"test":2432232314}`)), webhook.ErrSignature, "the bytes as sent, not re-encoded JSON")
}

func TestInvalidConfig(t *testing.T) {
	t.Parallel()
	st := memstore.New()
	acmeID := func(r *http.Request, _ []byte) string { return r.Header.Get("X-Acme-Id") }
	_, err := webhook.Middleware(webhook.Provider{Name: "acme", ID: acmeID}, idempotency.Config{Store: st})
	require.ErrorContains(t, err, "Provider.Verify")
	_, err = webhook.Middleware(webhook.Provider{Name: "has space", ID: acmeID, Verify: func(*http.Request, []byte) error { return errors.New("no") }}, idempotency.Config{Store: st})
	require.ErrorContains(t, err, "Provider.Name")
	_, err = webhook.Middleware(must(webhook.GitHub(githubSecret)), idempotency.Config{Store: st, Subject: idempotency.StaticSubject("x")})
	require.ErrorContains(t, err, "Config.Subject")
	_, err = webhook.Middleware(must(webhook.GitHub(githubSecret)), idempotency.Config{Store: st, KeyFormat: idempotency.KeyOpaque})
	require.ErrorContains(t, err, "Config.KeyFormat")
	_, err = webhook.StandardWebhooks("whsec_not base64!", nil)
	require.Error(t, err)
}
