package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency"
)

// ErrSignature is what every verifier of this package's presets returns,
// wrapped with the reason, for a delivery it refuses.
var ErrSignature = errors.New("webhook: signature not verified")

// DefaultTolerance is how far a signed timestamp may be from the clock by
// default: 5 minutes, Stripe's and Standard Webhooks' own libraries' value.
const DefaultTolerance = 5 * time.Minute

// Options configures the verifiers of providers whose signature covers a
// timestamp (Stripe, Standard Webhooks), which bounds how late a captured
// delivery can be sent again by someone else. A nil *Options means the
// defaults.
type Options struct {
	// Tolerance is how far the signed timestamp may be from Clock, either
	// way. Defaults to 5m (DefaultTolerance).
	Tolerance time.Duration
	// Clock returns the current time. Defaults to time.Now.
	Clock func() time.Time
}

// checkTimestamp reports whether the unix time ts (seconds) is within
// opts' tolerance of its clock.
func (opts *Options) checkTimestamp(ts string) error {
	tolerance, now := DefaultTolerance, time.Now
	if opts != nil && opts.Tolerance > 0 {
		tolerance = opts.Tolerance
	}
	if opts != nil && opts.Clock != nil {
		now = opts.Clock
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: the timestamp %q is not a unix time", ErrSignature, ts)
	}
	if d := now().Sub(time.Unix(sec, 0)).Abs(); d > tolerance {
		return fmt.Errorf("%w: the timestamp is %s from the clock, more than %s", ErrSignature, d, tolerance)
	}
	return nil
}

// one returns the single value of the header name, or an error naming it.
func one(r *http.Request, name string) (string, error) {
	values := r.Header.Values(name)
	switch {
	case len(values) == 0 || values[0] == "":
		return "", fmt.Errorf("%w: no %s header", ErrSignature, name)
	case len(values) > 1:
		return "", fmt.Errorf("%w: more than one %s header", ErrSignature, name)
	}
	return values[0], nil
}

// mac returns HMAC-SHA256 of the parts under key.
func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		h.Write(p)
	}
	return h.Sum(nil)
}

// Stripe's header names.
const (
	StripeSignatureHeader = "Stripe-Signature"
)

// Stripe returns the preset of a Stripe webhook endpoint signed with the
// endpoint's secret ("whsec_…"): the key is the event's "id" of the JSON
// body ("evt_…"), the same on every retry of one event to the endpoint;
// the signature is Stripe-Signature's "t=<unix time>,v1=<hex>" (more v1
// values during a secret's rotation), HMAC-SHA256 of "<t>.<body>" under
// the secret as it is written, with t within opts' tolerance.
func Stripe(secret string, opts *Options) Provider {
	return Provider{
		Name: "stripe",
		Key: idempotency.BodyKey(func(e struct {
			ID string `json:"id"`
		}) string {
			return e.ID
		}),
		Verify: func(r *http.Request, body []byte) error {
			header, err := one(r, StripeSignatureHeader)
			if err != nil {
				return err
			}
			var ts string
			var sigs [][]byte
			for item := range strings.SplitSeq(header, ",") {
				k, v, _ := strings.Cut(strings.TrimSpace(item), "=")
				switch k {
				case "t":
					ts = v
				case "v1":
					if sig, err := hex.DecodeString(v); err == nil {
						sigs = append(sigs, sig)
					}
				}
			}
			if ts == "" || len(sigs) == 0 {
				return fmt.Errorf("%w: %s has no t or no v1 signature", ErrSignature, StripeSignatureHeader)
			}
			if err := opts.checkTimestamp(ts); err != nil {
				return err
			}
			want := mac([]byte(secret), []byte(ts), []byte("."), body)
			for _, sig := range sigs {
				if hmac.Equal(sig, want) {
					return nil
				}
			}
			return fmt.Errorf("%w: no v1 signature of %s matches", ErrSignature, StripeSignatureHeader)
		},
	}
}

// GitHub's header names.
const (
	GitHubDeliveryHeader  = "X-GitHub-Delivery"
	GitHubSignatureHeader = "X-Hub-Signature-256"
)

// GitHub returns the preset of a GitHub webhook (a repository's, an
// organization's or a GitHub App's) with the webhook's secret: the key is
// X-GitHub-Delivery, a GUID that a redelivery keeps; the signature is
// X-Hub-Signature-256's "sha256=<hex>", HMAC-SHA256 of the body under the
// secret. GitHub signs no timestamp, so a captured delivery verifies for
// as long as the secret lives; its record answers a copy sent again within
// the TTL with the first answer.
func GitHub(secret string) Provider {
	return Provider{
		Name: "github",
		Key:  idempotency.HeaderKey(GitHubDeliveryHeader),
		Verify: func(r *http.Request, body []byte) error {
			header, err := one(r, GitHubSignatureHeader)
			if err != nil {
				return err
			}
			hexSig, ok := strings.CutPrefix(header, "sha256=")
			sig, err := hex.DecodeString(hexSig)
			if !ok || err != nil {
				return fmt.Errorf("%w: %s is not sha256=<hex>", ErrSignature, GitHubSignatureHeader)
			}
			if !hmac.Equal(sig, mac([]byte(secret), body)) {
				return fmt.Errorf("%w: %s does not match", ErrSignature, GitHubSignatureHeader)
			}
			return nil
		},
	}
}

// Shopify's header names.
const (
	ShopifyEventIDHeader   = "X-Shopify-Event-Id"
	ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"
)

// Shopify returns the preset of a Shopify app's webhooks with the app's
// client secret: the key is X-Shopify-Event-Id, the same on every delivery
// of one event (Shopify's own advice for telling duplicates); the
// signature is X-Shopify-Hmac-Sha256, the base64 HMAC-SHA256 of the body
// under the secret. Shopify signs no timestamp (see GitHub).
func Shopify(secret string) Provider {
	return Provider{
		Name: "shopify",
		Key:  idempotency.HeaderKey(ShopifyEventIDHeader),
		Verify: func(r *http.Request, body []byte) error {
			header, err := one(r, ShopifySignatureHeader)
			if err != nil {
				return err
			}
			sig, err := base64.StdEncoding.DecodeString(header)
			if err != nil {
				return fmt.Errorf("%w: %s is not base64", ErrSignature, ShopifySignatureHeader)
			}
			if !hmac.Equal(sig, mac([]byte(secret), body)) {
				return fmt.Errorf("%w: %s does not match", ErrSignature, ShopifySignatureHeader)
			}
			return nil
		},
	}
}

// Standard Webhooks' header names.
const (
	StandardIDHeader        = "webhook-id"
	StandardTimestampHeader = "webhook-timestamp"
	StandardSignatureHeader = "webhook-signature"
)

// StandardWebhooks returns the preset of a sender that follows the
// Standard Webhooks specification (Svix, and the providers built on it)
// with the endpoint's symmetric secret, "whsec_" and the base64 of the
// key: the key is webhook-id, the same on every retry of one message; the
// signature is webhook-signature, a space-separated list of "v1,<base64>"
// (more than one during a secret's rotation), HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" under the decoded key, with
// webhook-timestamp within opts' tolerance. Asymmetric ("v1a") signatures
// are not checked: a delivery that carries only those is refused. It
// returns an error when secret does not decode.
func StandardWebhooks(secret string, opts *Options) (Provider, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) == 0 {
		return Provider{}, errors.New("webhook: the Standard Webhooks secret is not \"whsec_\" and a base64 key")
	}
	return Provider{
		Name: "standard-webhooks",
		Key:  idempotency.HeaderKey(StandardIDHeader),
		Verify: func(r *http.Request, body []byte) error {
			id, err := one(r, StandardIDHeader)
			if err != nil {
				return err
			}
			ts, err := one(r, StandardTimestampHeader)
			if err != nil {
				return err
			}
			header, err := one(r, StandardSignatureHeader)
			if err != nil {
				return err
			}
			if err := opts.checkTimestamp(ts); err != nil {
				return err
			}
			want := mac(key, []byte(id), []byte("."), []byte(ts), []byte("."), body)
			for item := range strings.FieldsSeq(header) {
				version, b64, _ := strings.Cut(item, ",")
				if version != "v1" {
					continue
				}
				if sig, err := base64.StdEncoding.DecodeString(b64); err == nil && hmac.Equal(sig, want) {
					return nil
				}
			}
			return fmt.Errorf("%w: no v1 signature of %s matches", ErrSignature, StandardSignatureHeader)
		},
	}, nil
}
