package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// DefaultTTL is how long a delivery's record lives by default. Its 4 days pass
// the longest automatic retry window of the providers here, with most of a day
// to spare. Standard Webhooks' example schedule ends 75.6 hours after the first
// attempt. Stripe retries for 3 days. GitHub redelivers, on request, deliveries
// of the past 3 days.
const DefaultTTL = 96 * time.Hour

// CodeSignatureInvalid is the code of the refusal of a delivery whose
// signature does not verify (401): it never reaches the store or the
// handler.
const CodeSignatureInvalid = "webhook_signature_invalid"

// CodeDeliveryIDMissing is the code of the refusal of a verified delivery
// without an id (400). Its detail names where the provider puts the id.
const CodeDeliveryIDMissing = "webhook_delivery_id_missing"

// Provider is a webhook sender: where its deliveries carry their id, and
// how their signature is checked. Stripe, GitHub, Shopify and
// StandardWebhooks return the presets; any other sender is a Provider of
// its own.
type Provider struct {
	// Name scopes the records: the deliveries of two providers (two names)
	// never share a record, whatever their ids. The presets use the provider's
	// name ("stripe"). Give each endpoint of one provider a name of its own
	// when each must handle the same event. Stripe sends one event, with one
	// id, to every endpoint subscribed to it. 1 to 64 visible ASCII characters;
	// keep it stable: another name forgets every delivery. Required.
	Name string

	// ID returns the delivery's id, or "" when it carries none. It runs after
	// Verify, on the verified bytes. The id must be the same for every retry
	// and redelivery of one event, and never the same for two events. Read it
	// from what the signature covers. Anyone who holds a copy can change an id
	// the provider does not sign. BodyDigest is the id of such a provider. It
	// is the record's key, read as an opaque key (idempotency.KeyOpaque).
	// Required.
	ID func(r *http.Request, body []byte) string

	// IDField says where ID reads the id, for the refusal of a delivery
	// without one ("the event's \"id\" in the JSON body"). Defaults to
	// "the delivery's id".
	IDField string

	// Verify checks the delivery's signature over body, the request body's
	// bytes as they arrived, and returns nil only for a delivery the
	// provider sent. It runs before anything else: a delivery it refuses
	// is answered with 401 webhook_signature_invalid, and neither the store
	// nor the handler sees it. Its error is logged, never sent. Required.
	Verify func(r *http.Request, body []byte) error
}

// Middleware returns net/http middleware for a webhook endpoint of p. It checks
// each delivery's signature (p.Verify), then runs idempotency.Middleware keyed
// by the delivery's id (p.ID). A retry or redelivery of a delivery that was
// answered gets the first answer again (Idempotent-Replayed: true). The handler
// does not run twice.
//
// cfg is idempotency.Middleware's, with these differences: Key, KeyFormat,
// Subject and Fingerprint are the preset's and must be left unset; TTL defaults
// to DefaultTTL. The user every record is kept under is the provider (p.Name),
// so two providers' equal ids are two records. The fingerprint is the method
// and path only. A provider's retry may carry other bytes for the same event:
// Stripe's event counts its pending deliveries. The verified id already says
// which event it is.
//
// A body over cfg.MaxBodyBytes is refused with 413 before it is verified.
// A verified delivery without an id is refused with 400
// webhook_delivery_id_missing, whose detail names p.IDField. The warning
// of a delivery that does not verify goes to cfg.Logger, by default the
// same JSON lines on standard output as the engine's.
//
// Middleware returns an error, and no middleware, when p or cfg is
// invalid. A p whose Verify accepts a delivery with no headers and no body
// is refused: it cannot tell the provider from anyone else.
func Middleware(p Provider, cfg idempotency.Config) (func(http.Handler) http.Handler, error) {
	if err := p.validate(); err != nil {
		return nil, err
	}
	switch {
	case cfg.Key != nil:
		return nil, errors.New("webhook: invalid Config: Config.Key is set; the provider's Key reads the delivery id: leave it unset")
	case cfg.KeyFormat != idempotency.KeyUUIDv4:
		return nil, errors.New("webhook: invalid Config: Config.KeyFormat is set; delivery ids are read as opaque keys: leave it unset")
	case cfg.Subject != nil:
		return nil, errors.New("webhook: invalid Config: Config.Subject is set; the records are scoped by Provider.Name: leave it unset")
	case cfg.Fingerprint != nil:
		return nil, errors.New("webhook: invalid Config: Config.Fingerprint is set; a delivery is fingerprinted by its method and path: leave it unset")
	}
	cfg.Key = idempotency.KeyFunc(func(ctx context.Context, _ idempotency.Request) (string, error) {
		id, _ := ctx.Value(deliveryIDKey{}).(string)
		return id, nil
	})
	cfg.KeyFormat = idempotency.KeyOpaque
	cfg.Subject = idempotency.StaticSubject(ProviderSubject(p.Name))
	cfg.Fingerprint = deliveryFingerprint
	if cfg.TTL == 0 {
		cfg.TTL = DefaultTTL
	}
	maxBody := cfg.MaxBodyBytes
	if maxBody <= 0 {
		maxBody = idempotency.DefaultMaxBodyBytes
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.NewJSONHandler(os.Stdout, nil))
	}
	idField := p.IDField
	if idField == "" {
		idField = "the delivery's id"
	}
	mw, err := idempotency.Middleware(cfg)
	if err != nil {
		return nil, err
	}
	return func(next http.Handler) http.Handler {
		protected := mw(next)
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var body []byte
			if r.Body != nil {
				var err error
				if body, err = io.ReadAll(io.LimitReader(r.Body, int64(maxBody)+1)); err != nil {
					refuse(w, problem.New(http.StatusBadRequest, problem.CodeValidation, "The request body could not be read."))
					return
				}
			}
			if len(body) > maxBody {
				refuse(w, problem.New(http.StatusRequestEntityTooLarge, idempotency.CodePayloadTooLarge, "The delivery's body is larger than this endpoint accepts."))
				return
			}
			if err := p.Verify(r, body); err != nil {
				logger.LogAttrs(r.Context(), slog.LevelWarn, "webhook", slog.String("provider", p.Name), slog.String("outcome", "unverified"), slog.String("error", err.Error()))
				refuse(w, problem.New(http.StatusUnauthorized, CodeSignatureInvalid, "The delivery's signature could not be verified."))
				return
			}
			id := p.ID(r, body)
			if id == "" {
				refuse(w, problem.New(http.StatusBadRequest, CodeDeliveryIDMissing, "The delivery carries no id: "+p.Name+" puts it in "+idField+"."))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), deliveryIDKey{}, id))
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			protected.ServeHTTP(w, r)
		})
	}, nil
}

// deliveryIDKey is the context key of a verified delivery's id.
type deliveryIDKey struct{}

// ProviderSubject is the subject the records of a provider named name are kept
// under (Config.Subject's result). The record's user id is
// idempotency.SubjectUUID of it, which the operations command's get needs. It
// is of the form idempotency.IssuerSubject gives, with the issuer "webhook",
// which no identity provider can issue: an OpenID Connect issuer is an https
// URL.
func ProviderSubject(name string) string {
	return idempotency.IssuerSubject("webhook", name)
}

// validate checks that p is complete.
func (p Provider) validate() error {
	switch {
	case p.Name == "":
		return errors.New("webhook: invalid Provider: Provider.Name is empty; name the provider (\"stripe\"), or the endpoint")
	case len(p.Name) > 64:
		return fmt.Errorf("webhook: invalid Provider: Provider.Name is %d bytes; at most 64", len(p.Name))
	case p.ID == nil:
		return errors.New("webhook: invalid Provider: Provider.ID is nil; say where the delivery id is (BodyDigest when the provider signs none)")
	case p.Verify == nil:
		return errors.New("webhook: invalid Provider: Provider.Verify is nil; every delivery's signature must be checked")
	}
	probe, _ := http.NewRequest(http.MethodPost, "/", http.NoBody)
	if p.Verify(probe, nil) == nil {
		return fmt.Errorf("webhook: invalid Provider: %s's Verify accepts a delivery with no signature; it must refuse what the provider did not sign", p.Name)
	}
	for i := 0; i < len(p.Name); i++ {
		if c := p.Name[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("webhook: invalid Provider: Provider.Name %q holds a character that is not visible ASCII", p.Name)
		}
	}
	return nil
}

// deliveryFingerprint is a delivery's fingerprint: its method and path.
func deliveryFingerprint(req idempotency.Request) (string, error) {
	h := sha256.New()
	for _, part := range []string{"webhook", req.Method, req.Path} {
		h.Write([]byte(strconv.Itoa(len(part))))
		h.Write([]byte{':'})
		h.Write([]byte(part))
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// refuse writes a refusal.
func refuse(w http.ResponseWriter, d problem.Details) {
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(d.Status)
	_, _ = w.Write(d.JSON()) // the client went away; nothing to be done
}
