package idempotency

import (
	"errors"
	"fmt"
	"iter"
	"strings"

	"github.com/google/uuid"
)

// HeaderName is the request header that carries the idempotency key by
// default (Config.Key).
const HeaderName = "Idempotency-Key"

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// KeyFormat is what an HTTP request's idempotency key must look like
// (Config.KeyFormat). Either format is accepted bare or as an RFC 8941
// sf-string ("\"…\"", the IETF draft's form, in which \" and \\ stand for
// '"' and '\').
type KeyFormat int

const (
	// KeyUUIDv4 accepts a UUID version 4 in its 8-4-4-4-12 hex form, of
	// either case, compared in lower case. The default.
	KeyUUIDv4 KeyFormat = iota
	// KeyOpaque accepts 1 to MaxOpaqueKeyLength visible ASCII characters,
	// compared exactly (Stripe's rule); a key holding a comma is sent quoted.
	KeyOpaque
)

// MaxOpaqueKeyLength is the longest key KeyOpaque accepts.
const MaxOpaqueKeyLength = 255

// String names the format as Config's messages do.
func (f KeyFormat) String() string {
	switch f {
	case KeyUUIDv4:
		return "KeyUUIDv4"
	case KeyOpaque:
		return "KeyOpaque"
	}
	return fmt.Sprintf("KeyFormat(%d)", int(f))
}

// describe is how a refusal names what the format expects.
func (f KeyFormat) describe() string {
	if f == KeyOpaque {
		return fmt.Sprintf("key of 1 to %d visible ASCII characters", MaxOpaqueKeyLength)
	}
	return "UUID version 4"
}

// errKeyMissing is a request without a key. Every error that errors.Is matches
// with errKeyInvalid is a malformed one. Its text says what is wrong with it,
// in words a client may read.
var (
	errKeyMissing   = errors.New("is missing")
	errKeyInvalid   = errors.New("is not a valid key")
	errKeyEmpty     = invalidKey("is empty")
	errKeyTwo       = invalidKey("holds two different keys")
	errKeyQuote     = invalidKey("holds a quoted string that is not a valid RFC 8941 sf-string")
	errKeyNotUUIDv4 = invalidKey("is not a UUID version 4")
	errKeyTooLong   = invalidKey(fmt.Sprintf("is longer than %d characters", MaxOpaqueKeyLength))
	errKeyChars     = invalidKey("holds a character that is not visible ASCII")
)

// keyInvalidError is one reason a key is malformed.
type keyInvalidError struct{ reason string }

func invalidKey(reason string) error { return &keyInvalidError{reason} }

func (e *keyInvalidError) Error() string { return e.reason }

func (e *keyInvalidError) Is(target error) bool { return target == errKeyInvalid }

// parseKey reads the key from every value found for the key header. Each
// value may itself be a comma-joined list (an HTTP API joins repeated
// headers that way; a comma inside an sf-string does not split it); every
// element must be the same key of format f, and the result is that key,
// normalised (a UUID in lower case).
func parseKey(values []string, f KeyFormat) (string, error) {
	if len(values) == 0 {
		return "", errKeyMissing
	}
	var key string
	for _, value := range values {
		for element := range splitElements(value) {
			k, err := parseKeyElement(element, f)
			if err != nil {
				return "", err
			}
			if key != "" && k != key {
				return "", errKeyTwo
			}
			key = k
		}
	}
	return key, nil
}

// splitElements yields the parts of a header value between the commas
// outside sf-strings, in order; a value without a comma is its one part.
// Nothing is allocated for them.
func splitElements(value string) iter.Seq[string] {
	return func(yield func(string) bool) {
		start, quoted := 0, false
		for i := 0; i < len(value); i++ {
			switch c := value[i]; {
			case quoted && c == '\\':
				i++
			case c == '"':
				quoted = !quoted
			case c == ',' && !quoted:
				if !yield(value[start:i]) {
					return
				}
				start = i + 1
			}
		}
		yield(value[start:])
	}
}

// parseKeyElement parses one bare or quoted key of format f.
func parseKeyElement(s string, f KeyFormat) (string, error) {
	s = strings.Trim(s, " \t")
	if strings.HasPrefix(s, `"`) {
		var ok bool
		if s, ok = unquoteSFString(s); !ok {
			return "", errKeyQuote
		}
	}
	if s == "" {
		return "", errKeyEmpty
	}
	if f == KeyOpaque {
		if len(s) > MaxOpaqueKeyLength {
			return "", errKeyTooLong
		}
		for i := 0; i < len(s); i++ {
			if s[i] < '!' || s[i] > '~' {
				return "", errKeyChars
			}
		}
		return s, nil
	}
	if !isUUIDv4(s) {
		return "", errKeyNotUUIDv4
	}
	return toLowerASCII(s), nil
}

// unquoteSFString returns the text of an RFC 8941 sf-string: printable
// ASCII between double quotes, in which only \" and \\ are escapes.
func unquoteSFString(s string) (string, bool) {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return "", false
	}
	inner := s[1 : len(s)-1]
	if !strings.ContainsAny(inner, `"\`) {
		for i := 0; i < len(inner); i++ {
			if inner[i] < ' ' || inner[i] > '~' {
				return "", false
			}
		}
		return inner, true
	}
	var b strings.Builder
	for i := 0; i < len(inner); i++ {
		c := inner[i]
		switch {
		case c == '\\':
			if i+1 == len(inner) || (inner[i+1] != '"' && inner[i+1] != '\\') {
				return "", false
			}
			i++
			b.WriteByte(inner[i])
		case c == '"' || c < ' ' || c > '~':
			return "", false
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// KeyNamespace is the namespace of the name-based UUIDs (version 5) that
// RecordKey makes of an opaque key or a prefixed one. It never changes.
const KeyNamespace = "ce5f0cda-6ecc-4a0a-9535-e4fde25b7642"

var keyNamespace = uuid.MustParse(KeyNamespace)

// RecordKey returns the key a store keeps (Ref.Key, a lower-case UUID) for an
// HTTP request's idempotency key. The key is as the request's parsing
// normalised it, under a key prefix (Config.KeyPrefix) and format:
//
//   - with KeyUUIDv4 and no prefix, the key itself;
//   - otherwise the UUID version 5, in KeyNamespace, of prefix + ":" + key
//     (uuid.NewSHA1(uuid.MustParse(KeyNamespace), []byte(prefix+":"+key))).
//
// A prefix holds no ':', so no two (prefix, key) pairs share a name.
func RecordKey(prefix string, f KeyFormat, key string) string {
	if prefix == "" && f == KeyUUIDv4 {
		return key
	}
	return uuid.NewSHA1(keyNamespace, []byte(prefix+":"+key)).String()
}

// HTTPRecordID returns the user id and the record key of the record that
// subject (Config.Subject's result) made with key, under prefix
// (Config.KeyPrefix) and format (Config.KeyFormat).
//
// Key is as the client sent it, bare or quoted. An operator finds a
// request's record with it, and tests assert on it. It fails when the
// subject is empty, the prefix is not a valid KeyPrefix, or the key is not
// of format.
func HTTPRecordID(prefix string, format KeyFormat, subject, key string) (userID, recordKey string, err error) {
	if err := validateKeyPrefix("Config", prefix); err != nil {
		return "", "", fmt.Errorf("idempotency: %w", err)
	}
	k, err := parseKeyElement(key, format)
	if err != nil {
		return "", "", fmt.Errorf("idempotency: the key %w; it must be one %s", err, format.describe())
	}
	if subject == "" {
		return "", "", errors.New("idempotency: the subject is empty")
	}
	return SubjectUUID(subject), RecordKey(prefix, format, k), nil
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
