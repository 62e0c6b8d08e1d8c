package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode"
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
// endpoint's secret ("whsec_…"). The signature is Stripe-Signature's "t=<unix
// time>,v1=<hex>" (more v1 values during a secret's rotation): HMAC-SHA256 of
// "<t>.<body>" under the secret as it is written, with t within opts'
// tolerance. Stripe signs the timestamp and the body. The body holds the
// event's "id" ("evt_…"), the same on every retry of one event to the endpoint.
// That id is the record's key.
//
// It returns an error when secret is not "whsec_" and at least 16 visible
// characters: an empty secret would verify a delivery anyone can sign.
func Stripe(secret string, opts *Options) (Provider, error) {
	rest, ok := strings.CutPrefix(secret, "whsec_")
	if err := checkSecret("Stripe", "the endpoint's signing secret", rest); err != nil || !ok {
		if err == nil {
			err = errors.New(`webhook: the Stripe secret (the endpoint's signing secret) does not start with "whsec_"`)
		}
		return Provider{}, err
	}
	return Provider{
		Name:    "stripe",
		IDField: `the event's "id" in the JSON body`,
		ID: func(_ *http.Request, body []byte) string {
			var e struct {
				ID string `json:"id"`
			}
			if json.Unmarshal(body, &e) != nil {
				return ""
			}
			return e.ID
		},
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
	}, nil
}

// GitHub's header names.
const (
	GitHubDeliveryHeader  = "X-GitHub-Delivery"
	GitHubSignatureHeader = "X-Hub-Signature-256"
)

// GitHub returns the preset of a GitHub webhook (a repository's, an
// organization's or a GitHub App's) with the webhook's secret. The
// signature is X-Hub-Signature-256's "sha256=<hex>": HMAC-SHA256 of the
// body under the secret.
//
// GitHub signs the body and nothing else. X-GitHub-Delivery is not signed, so
// anyone who holds a copy of a delivery can send it again under another id. The
// record's key is therefore the SHA-256 of the signed body (BodyDigest). A copy
// sent again under any id gets the first answer. A body moved under another
// event's id never answers that event. Two deliveries with byte-identical
// bodies are one delivery. GitHub signs no timestamp, so a captured delivery
// verifies for as long as the secret lives: after its record expires, a copy
// runs the handler again.
//
// It returns an error when secret is shorter than 16 characters or has
// white space at either end (an unset or badly quoted variable).
func GitHub(secret string) (Provider, error) {
	if err := checkSecret("GitHub", "the webhook's secret", secret); err != nil {
		return Provider{}, err
	}
	return Provider{
		Name:    "github",
		IDField: "the body (GitHub signs no delivery id)",
		ID:      BodyDigest,
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
	}, nil
}

// Shopify's header names.
const (
	ShopifyEventIDHeader   = "X-Shopify-Event-Id"
	ShopifySignatureHeader = "X-Shopify-Hmac-Sha256"
)

// Shopify returns the preset of a Shopify app's webhooks with the app's
// client secret. The signature is X-Shopify-Hmac-Sha256: the base64
// HMAC-SHA256 of the body under the secret.
//
// Shopify signs the body and nothing else: neither X-Shopify-Event-Id nor
// X-Shopify-Webhook-Id is signed. As with GitHub, the record's key is the
// SHA-256 of the signed body (BodyDigest), and Shopify signs no timestamp.
//
// It returns an error when secret is shorter than 16 characters or holds
// white space.
func Shopify(secret string) (Provider, error) {
	if err := checkSecret("Shopify", "the app's client secret", secret); err != nil {
		return Provider{}, err
	}
	if strings.ContainsFunc(secret, unicode.IsSpace) {
		return Provider{}, errors.New("webhook: the Shopify secret (the app's client secret) holds white space; a client secret has none")
	}
	return Provider{
		Name:    "shopify",
		IDField: "the body (Shopify signs no delivery id)",
		ID:      BodyDigest,
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
	}, nil
}

// BodyDigest is a Provider.ID for a sender that signs the body and not its
// delivery id: the hex SHA-256 of the body, which the signature covers.
func BodyDigest(_ *http.Request, body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// minSecretLength is the fewest characters a preset takes as a secret.
const minSecretLength = 16

// checkSecret refuses a secret that is empty, short, or framed by white
// space: the usual marks of an unset or badly quoted setting.
func checkSecret(provider, setting, secret string) error {
	switch {
	case secret == "":
		return fmt.Errorf("webhook: the %s secret (%s) is empty; an empty key verifies a delivery anyone can sign", provider, setting)
	case strings.TrimSpace(secret) != secret:
		return fmt.Errorf("webhook: the %s secret (%s) has white space at an end; remove it", provider, setting)
	case len(secret) < minSecretLength:
		return fmt.Errorf("webhook: the %s secret (%s) is %d characters; use the provider's secret, at least %d", provider, setting, len(secret), minSecretLength)
	}
	return nil
}

// Standard Webhooks' header names.
const (
	StandardIDHeader        = "webhook-id"
	StandardTimestampHeader = "webhook-timestamp"
	StandardSignatureHeader = "webhook-signature"
)

// StandardWebhooks returns the preset of a sender that follows the Standard
// Webhooks specification, such as Svix and the providers built on it. It takes
// the endpoint's symmetric secret: "whsec_" and the base64 of the key. The key
// is webhook-id, the same on every retry of one message. The signature is
// webhook-signature, a space-separated list of "v1,<base64>". It holds more
// than one during a secret's rotation. Each is HMAC-SHA256 of
// "<webhook-id>.<webhook-timestamp>.<body>" under the decoded key. The
// webhook-timestamp must be within opts' tolerance. The signature covers the
// id, the timestamp and the body: webhook-id is the record's key. Asymmetric
// ("v1a") signatures are not checked: a delivery that carries only those is
// refused. It returns an error when secret does not decode to a key of at least
// 16 bytes.
func StandardWebhooks(secret string, opts *Options) (Provider, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil || len(key) < minSecretLength {
		return Provider{}, errors.New("webhook: the Standard Webhooks secret (the endpoint's secret) is not \"whsec_\" and the base64 of a key of 16 bytes or more")
	}
	return Provider{
		Name:    "standard-webhooks",
		IDField: "the " + StandardIDHeader + " header",
		ID: func(r *http.Request, _ []byte) string {
			return r.Header.Get(StandardIDHeader)
		},
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
