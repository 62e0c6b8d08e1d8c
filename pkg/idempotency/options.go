package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// maxKeyPrefixLength bounds Config.KeyPrefix and FunctionConfig.KeyPrefix.
const maxKeyPrefixLength = 64

// adoptionDefaults sets the defaults of the key options: the header, the
// fingerprint.
func (c Config) adoptionDefaults() Config {
	if c.KeyHeader == "" {
		c.KeyHeader = HeaderName
	}
	if c.Fingerprint == nil {
		c.Fingerprint = Fingerprint
	}
	return c
}

// validateAdoption reports the problems of the key options.
func (c Config) validateAdoption() []error {
	var errs []error
	if c.KeyHeader == "" || strings.ContainsFunc(c.KeyHeader, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ':' }) {
		errs = append(errs, fmt.Errorf("Config.KeyHeader is %q, which is not a header name", c.KeyHeader))
	}
	if c.KeyFormat != KeyUUIDv4 && c.KeyFormat != KeyOpaque {
		errs = append(errs, fmt.Errorf("Config.KeyFormat is %v: use KeyUUIDv4 or KeyOpaque", c.KeyFormat))
	}
	if err := validateKeyPrefix("Config", c.KeyPrefix); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// validateKeyPrefix checks a KeyPrefix.
func validateKeyPrefix(typeName, prefix string) error {
	switch {
	case len(prefix) > maxKeyPrefixLength:
		return fmt.Errorf("%s.KeyPrefix is %d characters long: use at most %d", typeName, len(prefix), maxKeyPrefixLength)
	case strings.ContainsFunc(prefix, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ':' }):
		return fmt.Errorf("%s.KeyPrefix is %q: use visible ASCII characters other than ':'", typeName, prefix)
	}
	return nil
}

// Replay is what Config.OnReplay (and FunctionConfig.OnReplay) is given on
// a replay: the stored response, the record's metadata, and the headers
// about to be sent, which the hook may change. It is Powertools'
// response hook.
type Replay struct {
	// Key is the idempotency key as the request carried it (normalised: a
	// UUID in lower case), or a Function's key.
	Key string
	// UserID is the user id the record is kept under (SubjectUUID of the
	// subject), or a Function's scope id.
	UserID string
	// Response is the stored response, as it was kept. Changing it changes
	// nothing; change Header instead.
	Response idemstore.Response
	// Header holds the headers of the replay as it will be sent: the
	// stored content headers and Idempotent-Replayed: true. The hook may
	// add, change or remove any of them (an Age, a Date, a header saying
	// when the record expires). A Function's replay has no headers: the
	// hook only observes.
	Header http.Header
	// CreatedAt is when the record was claimed by the request it replays.
	// Zero on a replay from Config.LocalCache (which keeps no creation
	// time, so that a cached replay makes no round trip) and when the store
	// neither says nor can be asked (a Store without the Admin capability).
	CreatedAt time.Time
	// ExpiresAt is when the record expires and a new request with the key
	// runs again. Zero only when the store neither says nor can be asked.
	ExpiresAt time.Time
}

// replayMetadata fills the times of a replayed record when the store's
// claim answered without them (pgstore's replay is the stored envelope
// alone): one more read, made only when a replay hook wants them.
func (e *engine) replayMetadata(ctx context.Context, obs *observation, rec idemstore.Record) idemstore.Record {
	if !rec.ExpiresAt.IsZero() {
		return rec // from the store's claim, or the local cache (no CreatedAt)
	}
	admin, ok := e.store.(idemstore.Admin)
	if !ok {
		return rec
	}
	var full idemstore.Record
	var found bool
	err := obs.timed("get", func() (err error) {
		full, found, err = admin.Get(ctx, rec.UserID, rec.Key)
		return err
	})
	switch {
	case err != nil:
		obs.err = errors.Join(obs.err, fmt.Errorf("reading the replayed record's times: %w", err))
	case found:
		rec.CreatedAt, rec.ExpiresAt = full.CreatedAt, full.ExpiresAt
	}
	return rec
}

// requestKey returns the request's key, normalised, or why there is none:
// errKeyMissing, or an error that errors.Is matches with errKeyInvalid.
func (d *decorator) requestKey(ctx context.Context, view Request) (string, error) {
	if d.cfg.Key == nil {
		return parseKey(view.Header(d.cfg.KeyHeader), d.cfg.KeyFormat)
	}
	raw, err := d.cfg.Key(ctx, view)
	switch {
	case err != nil && !errors.Is(err, errKeyInvalid):
		return "", fmt.Errorf("%w: Config.Key failed: %w", errKeyUnreadable, err)
	case err != nil:
		return "", err
	case raw == "":
		return "", errKeyMissing
	}
	return parseKeyElement(raw, d.cfg.KeyFormat)
}

// errKeyUnreadable is a Config.Key that failed for a reason of its own,
// which is logged and never sent.
var errKeyUnreadable = invalidKey("could not be read from this request")

// keyProblem is the 400 that answers a request without a valid key: its
// detail names where the key is read, what was wrong and what is expected.
func (d *decorator) keyProblem(view Request, err error) problem.Details {
	source := "The " + d.cfg.KeyHeader + " header"
	if d.cfg.Key != nil {
		source = "The idempotency key of this request"
	}
	want := d.cfg.KeyFormat.describe()
	if errors.Is(err, errKeyMissing) {
		detail := "Send the " + d.cfg.KeyHeader + " header holding a new " + want + " with every " + view.Method + " request."
		if d.cfg.Key != nil {
			detail = "This request carries no idempotency key: send a new " + want + " with every " + view.Method + " request."
		}
		return problem.New(http.StatusBadRequest, CodeKeyMissing, detail)
	}
	reason := errKeyInvalid.Error()
	var ke *keyInvalidError
	if errors.As(err, &ke) {
		reason = ke.reason
	}
	return problem.New(http.StatusBadRequest, CodeKeyInvalid,
		source+" "+reason+": it must hold exactly one "+want+", bare or as a quoted string.")
}

// fingerprintProblem is the 400 that answers a request whose fingerprint
// cannot be computed.
func fingerprintProblem(err error) problem.Details {
	detail := "The request body is marked base64-encoded but is not valid base64."
	switch {
	case errors.Is(err, errBadBase64):
	case errors.Is(err, errBodyNotJSON):
		detail = "The request body is not the JSON this endpoint expects."
	default:
		detail = "The request could not be fingerprinted as this endpoint expects."
	}
	return problem.New(http.StatusBadRequest, CodeValidation, detail)
}

// unprotected runs the handler of a request without a key, with
// Config.AllowMissingKey: nothing is claimed or stored, and the request is
// logged and counted as OutcomeUnprotected.
func (d *decorator) unprotected(ctx context.Context, obs *observation, run func(ctx context.Context) (apigw.Response, error)) (apigw.Response, bool, error) {
	obs.outcome = OutcomeUnprotected
	start := time.Now()
	resp, err := run(ctx)
	obs.handlerMS = msSince(start)
	obs.handler = "ok"
	if err != nil {
		obs.handler, obs.err = "error", err
	} else {
		obs.status = resp.StatusCode
	}
	return apigw.Response{}, true, err
}

// onReplay calls Config.OnReplay with the replayed record and the headers
// about to be sent, which it may change.
func (d *decorator) onReplay(ctx context.Context, obs *observation, key string, rec idemstore.Record, header http.Header) {
	rec = d.e.replayMetadata(ctx, obs, rec)
	d.cfg.OnReplay(ctx, &Replay{
		Key:       key,
		UserID:    rec.UserID,
		Response:  *rec.Response,
		Header:    header,
		CreatedAt: rec.CreatedAt,
		ExpiresAt: rec.ExpiresAt,
	})
}

// FunctionRecordID returns the user id and the key under which the stores
// keep the record of a call of the function name (FunctionConfig.Name) with
// key (FunctionConfig.Key's result: for SQSHandler, by default the message
// id) in scope (FunctionConfig.Scope's result, "" without one), under
// prefix (FunctionConfig.KeyPrefix). Both are UUIDs derived from those
// strings (ADR 0080), so an operator cannot read them off a record; this
// call computes them, and cmd/keystore's -function flag calls it.
func FunctionRecordID(prefix, name, scope, key string) (userID, recordKey string) {
	if prefix == "" {
		return scopeID(name, scope), keyID(key)
	}
	return derivedUUID("prefixed-scope", prefix, name, scope), keyID(key)
}

// unprotected runs fn for an input without a key, with
// FunctionConfig.AllowMissingKey.
func (f *function[In, Out]) unprotected(ctx context.Context, obs *observation, in In) (Out, error) {
	obs.outcome = OutcomeUnprotected
	start := time.Now()
	out, err := f.fn(ctx, in)
	obs.handlerMS, obs.handler = msSince(start), "ok"
	if err != nil {
		obs.handler, obs.err = "error", err
	}
	return out, err
}

// onReplay calls FunctionConfig.OnReplay with the record a repeat is
// answered from.
func (f *function[In, Out]) onReplay(ctx context.Context, obs *observation, key string, ref idemstore.Ref, rec idemstore.Record) {
	rec.UserID, rec.Key = ref.UserID, ref.Key
	rec = f.e.replayMetadata(ctx, obs, rec)
	f.cfg.OnReplay(ctx, &Replay{
		Key:       key,
		UserID:    rec.UserID,
		Response:  *rec.Response,
		Header:    http.Header{},
		CreatedAt: rec.CreatedAt,
		ExpiresAt: rec.ExpiresAt,
	})
}
