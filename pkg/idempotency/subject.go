package idempotency

import "github.com/google/uuid"

// SubjectNamespace is the namespace of the name-based UUIDs (version 5,
// RFC 9562 §5.5) that SubjectUUID gives subjects which are not UUIDs.
// It never changes: a new namespace would give every such user new keys.
const SubjectNamespace = "bef2c47a-6534-42d3-b505-e0d14ac3b172"

var subjectNamespace = uuid.MustParse(SubjectNamespace)

// SubjectUUID returns the user id that the stores keep for an
// authenticated subject. The stores keep user ids as UUIDs; identity
// providers do not all issue them (Auth0's "auth0|6543210fedcba", Google's
// numeric ids, Okta's, an Entra object id in another form), so:
//
//   - a subject that is a UUID (a Cognito sub) is its own id, in lower
//     case;
//   - any other subject is the UUID version 5 of its exact bytes in
//     SubjectNamespace: uuid.NewSHA1(uuid.MustParse(SubjectNamespace),
//     []byte(subject)) in github.com/google/uuid, or uuid5 in Python's
//     uuid module.
//
// One subject therefore always has the same id, and two subjects never
// share one (short of a SHA-1 collision that the identity provider would
// have to issue). Subjects are compared exactly: "Auth0|X" and "auth0|x"
// are two users. The empty subject has no id (""). Every HTTP shape maps
// Config.UserID's result this way; a program whose own tables key on the
// user (the sample task API's do) calls SubjectUUID on the same subject to
// get the same id.
func SubjectUUID(subject string) string {
	switch {
	case subject == "":
		return ""
	case isUUID(subject):
		return toLowerASCII(subject)
	}
	return uuid.NewSHA1(subjectNamespace, []byte(subject)).String()
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
