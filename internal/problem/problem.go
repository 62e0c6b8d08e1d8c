// Package problem renders errors as RFC 9457 problem details
// (application/problem+json) with a stable machine-readable code.
//
// It is the one place where an error becomes a client-visible body: callers
// pass a Details value that they built from known outcomes, never an
// err.Error() string of an internal failure.
package problem

import "encoding/json"

// ContentType is the media type of every problem response.
const ContentType = "application/problem+json"

// Stable codes of the sample task API. Clients branch on these; they never
// change meaning. The idempotency library's own codes are exported by
// package idempotency (idempotency.CodeKeyMissing, …), which writes its
// refusals itself; the task API answers with them too where it refuses for
// the same reason.
const (
	CodeValidation       = "validation_failed"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	CodeUnavailable      = "service_unavailable"
	CodeInternal         = "internal_error"
)

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
	// Errors lists field-level problems of a validation failure.
	Errors []FieldError `json:"errors,omitempty"`
}

// FieldError names one invalid field of a request body or parameter.
type FieldError struct {
	// Field is the JSON name of the field (or parameter).
	Field string `json:"field"`
	// Detail says what is wrong with it.
	Detail string `json:"detail"`
}

// TypeBase is the prefix of every problem type URI; the code follows it.
const TypeBase = "https://ichido.dev/problems/"

// New returns Details for code with its registered type and title.
func New(status int, code, detail string) Details {
	return Details{
		Type:   TypeBase + code,
		Title:  titles[code],
		Status: status,
		Detail: detail,
		Code:   code,
	}
}

// JSON returns the problem's JSON encoding.
func (d Details) JSON() []byte {
	b, err := json.Marshal(d)
	if err != nil { // cannot happen: every field is a plain string or int
		return []byte(`{"type":"about:blank","title":"Internal Server Error","status":500,"code":"internal_error"}`)
	}
	return b
}

// titles has the title of every code the task API answers with: its own
// constants above, and the three of the library's (exported by package
// idempotency) that it answers with where it refuses for the same reason.
var titles = map[string]string{
	"unauthenticated":        "Unauthenticated",
	"payload_too_large":      "Payload too large",
	"idempotency_key_reused": "Idempotency-Key reused with a different request",
	CodeValidation:           "Invalid request",
	CodeNotFound:             "Not found",
	CodeMethodNotAllowed:     "Method not allowed",
	CodeUnavailable:          "Service unavailable",
	CodeInternal:             "Internal server error",
}
