package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/canonjson"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// KeySource says where a protected request's key is read (Config.Key):
// HeaderKey, PathKey, BodyKey, or a KeyFunc of your own. It reads the key as
// the client sent it, bare or as an RFC 8941 sf-string, of Config.KeyFormat. A
// request without one gets 400 idempotency_key_missing, or an unprotected run
// with Config.AllowMissingKey.
//
// A key from the request is the client's. The user (Config.Subject) and
// Config.KeyPrefix scope it, so a client only names its own records.
type KeySource interface {
	// requestKey returns req's key in format f, normalised, or why there
	// is none: errKeyMissing, or an error that errors.Is matches with
	// errKeyInvalid.
	requestKey(ctx context.Context, req Request, f KeyFormat) (string, error)
}

// KeyFunc is a KeySource of your own: it returns the request's key, or "" when
// the request carries none. An error is answered with 400
// idempotency_key_invalid. Its text is logged, not sent. The errors of this
// package's KeySources are written for the client and are sent.
type KeyFunc func(ctx context.Context, req Request) (string, error)

func (f KeyFunc) requestKey(ctx context.Context, req Request, format KeyFormat) (string, error) {
	raw, err := f(ctx, req)
	switch {
	case err != nil && !errors.Is(err, errKeyInvalid):
		return "", fmt.Errorf("%w: Config.Key failed: %w", errKeyUnreadable, err)
	case err != nil:
		return "", err
	case raw == "":
		return "", errKeyMissing
	}
	return parseKeyElement(raw, format)
}

// headerKey is the KeySource of a header: the default, Idempotency-Key, or
// another header's name. Its problems name the header.
type headerKey string

func (h headerKey) requestKey(_ context.Context, req Request, format KeyFormat) (string, error) {
	return parseKey(req.Header(string(h)), format)
}

// HeaderKey reads the key from the header name (any case), e.g.
// "X-Idempotency-Key". A header sent more than once, or a comma-joined
// list, must repeat one value. The answers to a request without a valid
// key name the header.
func HeaderKey(name string) KeySource { return headerKey(name) }

// PathKey returns a KeySource that reads the path parameter name
// (Request.PathParameters). That is {name} in an API Gateway route or a
// net/http ServeMux pattern (Go 1.23 or later). A router that keeps its
// parameters in the context instead (chi) is read by a KeyFunc of its own:
//
//	Key: idempotency.KeyFunc(func(ctx context.Context, _ idempotency.Request) (string, error) {
//		return chi.URLParamFromCtx(ctx, "orderID"), nil
//	}),
func PathKey(name string) KeySource {
	return KeyFunc(func(_ context.Context, req Request) (string, error) {
		return req.PathParameters[name], nil
	})
}

// BodyKey returns a KeySource that decodes the request body as JSON into T and
// returns key of it. The body is base64-decoded first when so marked. The key
// is typically the client's own id of the operation: Powertools'
// event_key_jmespath, typed. A body that does not decode is answered with 400
// idempotency_key_invalid, before anything runs.
func BodyKey[T any](key func(T) string) KeySource {
	return KeyFunc(func(_ context.Context, req Request) (string, error) {
		var v T
		if err := decodeBody(req, &v); err != nil {
			return "", invalidKey("cannot be read, since the request body is not the JSON this endpoint expects")
		}
		return key(v), nil
	})
}

// decodeBody decodes req's body as JSON into v.
func decodeBody(req Request, v any) error {
	body := []byte(req.Body)
	if req.IsBase64Encoded {
		var err error
		if body, err = base64.StdEncoding.DecodeString(req.Body); err != nil {
			return errBadBase64
		}
	}
	return json.Unmarshal(body, v)
}

// FingerprintFunc returns the fingerprint of an HTTP request
// (Config.Fingerprint): two requests with one key are the same request when
// their fingerprints are equal. Fingerprint, the default, covers the method,
// the path, the query and the body. FingerprintBody covers the method, the path
// and the parts of the body that matter. An error is answered with 400
// validation_failed before anything runs.
type FingerprintFunc func(req Request) (string, error)

// errBodyNotJSON is a FingerprintBody request whose body is not the JSON
// the endpoint expects.
var errBodyNotJSON = errors.New("the request body is not the JSON this endpoint expects")

// fieldsHashVersion starts every FingerprintBody hash, so that it never
// equals a Fingerprint.
const fieldsHashVersion = "ichido-request-fields-hash-v1"

// FingerprintBody returns a Config.Fingerprint over the method, the concrete
// path and part(body). The request body is base64-decoded first when so marked,
// then decoded as JSON into T. The value part returns of it is encoded as JSON
// and canonicalised: object keys sorted, no white space. It is Powertools'
// payload_validation_jmespath, typed. The mismatch rules:
//
//   - a retry with the same key, method, path and part gets the stored
//     response, whatever else differs (other body fields, their order, the
//     query, headers);
//   - the same key with another part, method or path is refused with 422
//     idempotency_key_reused;
//   - a body that does not decode as T is refused with 400
//     validation_failed, and nothing runs.
func FingerprintBody[T any](part func(T) any) FingerprintFunc {
	return func(req Request) (string, error) {
		var v T
		if err := decodeBody(req, &v); err != nil {
			return "", errBodyNotJSON
		}
		b, err := json.Marshal(part(v))
		if err != nil {
			return "", fmt.Errorf("idempotency: FingerprintBody's part does not encode as JSON: %w", err)
		}
		h := sha256.New()
		writePart(h, []byte(fieldsHashVersion))
		writePart(h, bytesOf(req.Method))
		writePart(h, bytesOf(req.Path))
		if !canonjson.Write(h, b) {
			writePart(h, b)
		}
		return hex.EncodeToString(h.Sum(nil)), nil
	}
}

// patternParameters returns the path parameters of a request that a
// net/http ServeMux routed by a pattern with wildcards ("POST
// /orders/{id}/lines/{rest...}"), nil otherwise.
func patternParameters(r *http.Request) map[string]string {
	pattern := r.Pattern
	if i := strings.IndexByte(pattern, '/'); i >= 0 {
		pattern = pattern[i:]
	} else {
		return nil
	}
	var params map[string]string
	for segment := range strings.SplitSeq(pattern, "/") {
		if len(segment) < 3 || segment[0] != '{' || segment[len(segment)-1] != '}' {
			continue
		}
		name := strings.TrimSuffix(segment[1:len(segment)-1], "...")
		if name == "$" || name == "" {
			continue
		}
		if params == nil {
			params = map[string]string{}
		}
		params[name] = r.PathValue(name)
	}
	return params
}

// maxKeyPrefixLength bounds Config.KeyPrefix and FunctionConfig.KeyPrefix.
const maxKeyPrefixLength = 64

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

// requestKey returns the request's key, normalised, or why there is none:
// errKeyMissing, or an error that errors.Is matches with errKeyInvalid.
func (d *decorator) requestKey(ctx context.Context, view Request) (string, error) {
	return d.cfg.Key.requestKey(ctx, view, d.cfg.KeyFormat)
}

// errKeyUnreadable is a Config.Key that failed for a reason of its own,
// which is logged and never sent.
var errKeyUnreadable = invalidKey("could not be read from this request")

// keyProblem is the 400 that answers a request without a valid key: its
// detail names where the key is read, what was wrong and what is expected.
func (d *decorator) keyProblem(view Request, err error) problem.Details {
	header, isHeader := d.cfg.Key.(headerKey)
	source := "The idempotency key of this request"
	if isHeader {
		source = "The " + string(header) + " header"
	}
	want := d.cfg.KeyFormat.describe()
	if errors.Is(err, errKeyMissing) {
		detail := "This request carries no idempotency key: send a new " + want + " with every " + view.Method + " request."
		if isHeader {
			detail = "Send the " + string(header) + " header holding a new " + want + " with every " + view.Method + " request."
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
