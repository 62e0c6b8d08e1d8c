// Package problem renders the library's refusals as RFC 9457 problem
// details (application/problem+json) with a stable machine-readable code.
//
// It is the one place where a refusal becomes a client-visible body: the
// engine passes a code and a detail it wrote itself, never the text of an
// internal error.
package problem

import "encoding/json"

// ContentType is the media type of every problem response.
const ContentType = "application/problem+json"

// TypeBase is the prefix of every problem type URI; the code follows it.
const TypeBase = "https://ichido.dev/problems/"

// CodeValidation is the code of a request the engine cannot read (a body
// that could not be read, a fingerprint that cannot be taken).
const CodeValidation = "validation_failed"

// Details is an RFC 9457 problem object.
type Details struct {
	// Type is a URI reference naming the problem type.
	Type string `json:"type"`
	// Title is a short, human-readable summary of the problem type.
	Title string `json:"title"`
	// Status is the HTTP status code.
	Status int `json:"status"`
	// Detail explains this occurrence for a person.
	Detail string `json:"detail,omitempty"`
	// Code is the stable machine-readable code.
	Code string `json:"code"`
}

// New returns Details for code with its registered type and title.
func New(status int, code, detail string) Details {
	return Details{Type: TypeBase + code, Title: titles[code], Status: status, Detail: detail, Code: code}
}

// JSON returns the problem's JSON encoding.
func (d Details) JSON() []byte {
	b, err := json.Marshal(d)
	if err != nil { // cannot happen: every field is a plain string or int
		return []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal_error"}`)
	}
	return b
}

// titles has the title of every code the engine and the webhook receivers
// answer with; packages idempotency and webhook export the codes.
var titles = map[string]string{
	"idempotency_key_missing":         "Idempotency-Key header missing",
	"idempotency_key_invalid":         "Idempotency-Key header invalid",
	"unauthenticated":                 "Unauthenticated",
	"idempotency_key_in_use":          "Request with this Idempotency-Key in progress",
	"idempotency_key_reused":          "Idempotency-Key reused with a different request",
	"idempotency_store_unavailable":   "Idempotency store unavailable",
	"payload_too_large":               "Payload too large",
	"idempotency_store_misconfigured": "Idempotency store misconfigured",
	"idempotency_response_not_kept":   "Response not kept for replay",
	"idempotency_response_mismatch":   "Response differs from the completed one",
	CodeValidation:                    "Invalid request",
	"webhook_signature_invalid":       "Webhook signature invalid",
	"webhook_delivery_id_missing":     "Webhook delivery id missing",
}
