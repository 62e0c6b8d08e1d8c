package pgstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/ichido/ichido/pkg/idempotency"
)

// encodingBase64 marks a body or header set kept as base64 because it cannot
// be JSONB text as it is.
const encodingBase64 = "base64"

// envelope is what response_body holds: the stored response as a JSON object
// whose body is a JSON string, never a parsed JSON value, so that JSONB's
// normalisation (key order, white space, duplicate keys, number forms) cannot
// touch it and the replay is byte for byte.
//
// JSONB text cannot hold every Go string: \u0000 is refused and invalid UTF-8
// would be replaced by U+FFFD on the way in. A body (or a header set) holding
// either is kept as base64 of its bytes, marked by BodyEncoding (or
// HeadersEncoding) "base64"; without a marker the value is the text itself.
type envelope struct {
	Status          int               `json:"status"`
	Headers         map[string]string `json:"headers,omitempty"`
	HeadersEncoding string            `json:"headersEncoding,omitempty"`
	Body            string            `json:"body"`
	BodyEncoding    string            `json:"bodyEncoding,omitempty"`
	IsBase64Encoded bool              `json:"isBase64Encoded,omitempty"`
}

// jsonbSafe reports whether s survives as JSONB text unchanged.
func jsonbSafe(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// encodeEnvelope returns the JSON text of r's envelope.
func encodeEnvelope(r idempotency.StoredResponse) (string, error) {
	env := envelope{Status: r.StatusCode, Body: r.Body, IsBase64Encoded: r.IsBase64Encoded}
	if !jsonbSafe(r.Body) {
		env.Body = base64.StdEncoding.EncodeToString([]byte(r.Body))
		env.BodyEncoding = encodingBase64
	}
	if len(r.Headers) > 0 {
		env.Headers = r.Headers
		safe := true
		for k, v := range r.Headers {
			if !jsonbSafe(k) || !jsonbSafe(v) {
				safe = false
				break
			}
		}
		if !safe {
			env.Headers = make(map[string]string, len(r.Headers))
			for k, v := range r.Headers {
				env.Headers[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
			}
			env.HeadersEncoding = encodingBase64
		}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(env); err != nil {
		return "", fmt.Errorf("encoding the response envelope: %w", err)
	}
	return strings.TrimSuffix(buf.String(), "\n"), nil
}

// decodeEnvelope reads an envelope written by encodeEnvelope.
func decodeEnvelope(text []byte) (*idempotency.StoredResponse, error) {
	var env envelope
	if err := json.Unmarshal(text, &env); err != nil {
		return nil, fmt.Errorf("decoding the response envelope: %w", err)
	}
	r := &idempotency.StoredResponse{StatusCode: env.Status, Body: env.Body, IsBase64Encoded: env.IsBase64Encoded}
	switch env.BodyEncoding {
	case "":
	case encodingBase64:
		b, err := base64.StdEncoding.DecodeString(env.Body)
		if err != nil {
			return nil, fmt.Errorf("decoding the response envelope's body: %w", err)
		}
		r.Body = string(b)
	default:
		return nil, fmt.Errorf("decoding the response envelope: unknown bodyEncoding %q", env.BodyEncoding)
	}
	switch env.HeadersEncoding {
	case "":
		r.Headers = env.Headers
	case encodingBase64:
		r.Headers = make(map[string]string, len(env.Headers))
		for k, v := range env.Headers {
			kb, kerr := base64.StdEncoding.DecodeString(k)
			vb, verr := base64.StdEncoding.DecodeString(v)
			if err := errors.Join(kerr, verr); err != nil {
				return nil, fmt.Errorf("decoding the response envelope's headers: %w", err)
			}
			r.Headers[string(kb)] = string(vb)
		}
	default:
		return nil, fmt.Errorf("decoding the response envelope: unknown headersEncoding %q", env.HeadersEncoding)
	}
	return r, nil
}
