package idempotency_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
)

// TestSubjectUUIDReadsOnlyCanonicalFraming: a subject that spells a part
// length of IssuerSubject's framing another way is another user.
func TestSubjectUUIDReadsOnlyCanonicalFraming(t *testing.T) {
	t.Parallel()
	iss, sub := "https://issuer.example.com", "alice"
	canonical := idempotency.IssuerSubject(iss, sub)
	want := idempotency.SubjectUUID(canonical)
	for _, spell := range []func(n string) string{
		func(n string) string { return "+" + n },
		func(n string) string { return "0" + n },
		func(n string) string { return "+0" + n },
	} {
		forged := strings.Replace(canonical, " 5:", " "+spell("5")+":", 1)
		forged = strings.Replace(forged, " 26:", " "+spell("26")+":", 1)
		require.NotEqual(t, canonical, forged)
		require.NotEqual(t, want, idempotency.SubjectUUID(forged), "subject %q", forged)
	}
	require.Equal(t, want, idempotency.SubjectUUID(canonical))
}
