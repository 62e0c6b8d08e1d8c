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
)

// KeyFunc returns the idempotency key of an HTTP request from somewhere
// other than the key header (Config.Key): a path parameter (PathKey), a
// body field (BodyKey), another header (HeaderKey), or any function of
// the request. It returns the key as the client sent it, bare or as an
// RFC 8941 sf-string, which must then be of Config.KeyFormat; "" when the
// request carries none (400 idempotency_key_missing, or an unprotected run
// with Config.AllowMissingKey). An error is answered with 400
// idempotency_key_invalid; its text is logged, not sent, unless it comes
// from one of this package's KeyFuncs, whose errors are written for the
// client.
//
// Like the header, a key from the request is the client's: it is scoped by
// the user (Config.UserID) and Config.KeyPrefix, so a client can only ever
// name its own records.
type KeyFunc func(ctx context.Context, req Request) (string, error)

// HeaderKey returns a KeyFunc that reads the header name (any case). A
// header sent more than once, or a comma-joined list, must repeat one
// value. Config.KeyHeader is the usual way to rename the key header;
// HeaderKey is for a KeyFunc of your own that tries several places.
func HeaderKey(name string) KeyFunc {
	return func(_ context.Context, req Request) (string, error) {
		var key string
		for _, value := range req.Header(name) {
			for element := range splitElements(value) {
				element = strings.Trim(element, " \t")
				if key != "" && element != key {
					return "", errKeyTwo
				}
				key = element
			}
		}
		return key, nil
	}
}

// PathKey returns a KeyFunc that reads the path parameter name
// (Request.PathParameters): a route's {name} on API Gateway, or a pattern's
// {name} in a net/http ServeMux (Go 1.23 or later). A router that keeps its
// parameters in the context instead (chi) is read by a KeyFunc of its own:
//
//	Key: func(ctx context.Context, _ idempotency.Request) (string, error) {
//		return chi.URLParamFromCtx(ctx, "orderID"), nil
//	},
func PathKey(name string) KeyFunc {
	return func(_ context.Context, req Request) (string, error) {
		return req.PathParameters[name], nil
	}
}

// BodyKey returns a KeyFunc that decodes the request body (base64-decoded
// first when so marked) as JSON into T and returns key of it, typically
// the client's own id of the operation: Powertools' event_key_jmespath,
// typed. A body that does not decode is answered with 400
// idempotency_key_invalid, before anything runs.
func BodyKey[T any](key func(T) string) KeyFunc {
	return func(_ context.Context, req Request) (string, error) {
		var v T
		if err := decodeBody(req, &v); err != nil {
			return "", invalidKey("cannot be read, since the request body is not the JSON this endpoint expects")
		}
		return key(v), nil
	}
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
// (Config.Fingerprint): two requests with one key are the same request
// when their fingerprints are equal. Fingerprint, the default, covers the
// method, the path, the query and the body; FingerprintBody covers the
// method, the path and the parts of the body that matter. An error is
// answered with 400 validation_failed before anything runs.
type FingerprintFunc func(req Request) (string, error)

// errBodyNotJSON is a FingerprintBody request whose body is not the JSON
// the endpoint expects.
var errBodyNotJSON = errors.New("the request body is not the JSON this endpoint expects")

// fieldsHashVersion starts every FingerprintBody hash, so that it never
// equals a Fingerprint.
const fieldsHashVersion = "ichido-request-fields-hash-v1"

// FingerprintBody returns a Config.Fingerprint over the method, the
// concrete path and part(body): the request body (base64-decoded first
// when so marked) decoded as JSON into T, and the value part returns of it,
// encoded as JSON and canonicalised (object keys sorted, no white space).
// It is Powertools' payload_validation_jmespath, typed. The mismatch rules:
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
		if !canonicalJSON(h, b) {
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
