package idempotency

import (
	"context"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"
)

// SubjectNamespace is the namespace of the name-based UUIDs (version 5,
// RFC 9562 §5.5) that SubjectUUID gives subjects which are not kept as
// they are. It never changes: a new namespace would give every such user
// new keys.
const SubjectNamespace = "bef2c47a-6534-42d3-b505-e0d14ac3b172"

var subjectNamespace = uuid.MustParse(SubjectNamespace)

// SubjectUUID returns the user id that the stores keep for an
// authenticated subject, a UUID:
//
//   - a UUID of a version this package never derives (not 5 or 8), such
//     as a Cognito sub, is its own id, in lower case;
//   - a subject made by IssuerSubject or IAMPrincipal gets a UUID version
//     8 derived from its parts;
//   - any other subject (Auth0's "auth0|6543210fedcba", a UUID of version
//     5 or 8) gets the UUID version 5 of its exact bytes in
//     SubjectNamespace (uuid.NewSHA1 in github.com/google/uuid).
//
// The three kinds never meet, so two subjects never share an id (short of
// a hash collision), not even a subject that is the text of another's id.
// Subjects are compared exactly, UUIDs in any case. "" has no id ("").
func SubjectUUID(subject string) string {
	switch {
	case subject == "":
		return ""
	case isUUID(subject) && subject[14] != '5' && subject[14] != '8':
		return toLowerASCII(subject)
	}
	if tag, parts, ok := parseQualified(subject); ok {
		return derivedUUID(append([]string{tag}, parts...)...)
	}
	return uuid.NewSHA1(subjectNamespace, []byte(subject)).String()
}

// IssuerSubject is the subject a SubjectFunc returns where several identity
// providers reach one store. An OpenID Connect subject is unique only within
// its issuer ("iss"), so the user is the pair.
func IssuerSubject(issuer, subject string) string {
	if subject == "" {
		return ""
	}
	return qualified("issuer", issuer, subject)
}

// TenantUserID is the user id a record of userID is kept under in tenant.
// userID is a SubjectUUID or a function's scope id (FunctionRecordID). Without
// a tenant ("") it is userID, else a UUID version 8 of both.
func TenantUserID(tenant, userID string) string {
	if tenant == "" {
		return userID
	}
	return derivedUUID("tenant", tenant, userID)
}

// lambdaTenant is the default Settings.Tenant: the tenant of a Lambda
// invocation in tenant isolation mode.
func lambdaTenant(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		return lc.TenantID
	}
	return ""
}

// qualifiedMark opens a subject made of parts (IssuerSubject, IAMPrincipal). It
// is a byte that never begins valid UTF-8. So no subject that an identity
// provider issues (JSON text) can take that form.
const qualifiedMark = "\xffichido:"

// qualified returns the subject of tag's parts: the mark, the tag, then
// each part as its length, a colon and its bytes.
func qualified(tag string, parts ...string) string {
	var b strings.Builder
	b.WriteString(qualifiedMark)
	b.WriteString(tag)
	for _, p := range parts {
		b.WriteByte(' ')
		b.WriteString(strconv.Itoa(len(p)))
		b.WriteByte(':')
		b.WriteString(p)
	}
	return b.String()
}

// parseQualified reads a subject that qualified made, with a known tag.
func parseQualified(s string) (tag string, parts []string, ok bool) {
	rest, found := strings.CutPrefix(s, qualifiedMark)
	if !found || utf8.ValidString(s) {
		return "", nil, false
	}
	tag, rest, _ = strings.Cut(rest, " ")
	if tag != "issuer" && tag != "iam" {
		return "", nil, false
	}
	for rest != "" {
		n, tail, found := strings.Cut(rest, ":")
		size, err := strconv.Atoi(n)
		if !found || err != nil || size < 0 || size > len(tail) {
			return "", nil, false
		}
		parts = append(parts, tail[:size])
		rest = tail[size:]
		if rest != "" {
			if rest[0] != ' ' {
				return "", nil, false
			}
			rest = rest[1:]
		}
	}
	// Only the framing qualified writes is read: a length written another
	// way ("+5", "05") is another subject, compared exactly.
	if len(parts) != 2 || qualified(tag, parts...) != s {
		return "", nil, false
	}
	return tag, parts, true
}

// toLowerASCII lowers the letters of a UUID, allocating only when one is
// upper case.
func toLowerASCII(s string) string {
	for i := 0; i < len(s); i++ {
		if 'A' <= s[i] && s[i] <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if 'A' <= b[j] && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}
