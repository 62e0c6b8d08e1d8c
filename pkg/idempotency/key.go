package idempotency

import (
	"errors"
	"strings"
)

// HeaderName is the request header that carries the idempotency key.
const HeaderName = "Idempotency-Key"

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"

var (
	errKeyMissing = errors.New("the Idempotency-Key header is missing")
	errKeyInvalid = errors.New("the Idempotency-Key header must be one UUID version 4, bare or as a quoted string")
)

// parseKey reads the key from every value found for the Idempotency-Key
// header. Each value may itself be a comma-joined list (an HTTP API joins
// repeated headers that way); every element must be the same UUID v4, bare
// or as an RFC 8941 sf-string, and the result is that UUID in lower case.
func parseKey(values []string) (string, error) {
	if len(values) == 0 {
		return "", errKeyMissing
	}
	var key string
	for _, value := range values {
		for element := range strings.SplitSeq(value, ",") {
			k, ok := parseKeyElement(element)
			if !ok || (key != "" && k != key) {
				return "", errKeyInvalid
			}
			key = k
		}
	}
	return key, nil
}

// parseKeyElement parses one bare or quoted UUID v4.
func parseKeyElement(s string) (string, bool) {
	s = strings.Trim(s, " \t")
	if len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"' {
		// An sf-string may escape only '"' and '\\', neither of which a UUID
		// holds, so the inner text must be the UUID itself.
		s = s[1 : len(s)-1]
	}
	if !isUUIDv4(s) {
		return "", false
	}
	return strings.ToLower(s), true
}

// isUUIDv4 reports whether s is a UUID in the 8-4-4-4-12 hex form with
// version 4 and the RFC 4122 (RFC 9562) variant.
func isUUIDv4(s string) bool {
	if !isUUID(s) {
		return false
	}
	if s[14] != '4' {
		return false
	}
	switch s[19] {
	case '8', '9', 'a', 'b', 'A', 'B':
		return true
	}
	return false
}

// isUUID reports whether s is a UUID of any version in the 8-4-4-4-12 hex
// form (no braces, no urn: prefix).
func isUUID(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
