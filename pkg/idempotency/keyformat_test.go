package idempotency

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParseOpaqueKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", MaxOpaqueKeyLength)
	for _, tc := range []struct {
		name   string
		values []string
		want   string
		err    error
	}{
		{"bare", []string{"order-1842/charge"}, "order-1842/charge", nil},
		{"case kept", []string{"Order-1842"}, "Order-1842", nil},
		{"a UUID is an opaque key too, as sent", []string{"8E03978E-40D5-43E8-BC93-6894A57F9324"}, "8E03978E-40D5-43E8-BC93-6894A57F9324", nil},
		{"sf-string", []string{`"order-1842"`}, "order-1842", nil},
		{"sf-string with escapes", []string{`"a\"b\\c"`}, `a"b\c`, nil},
		{"comma inside an sf-string", []string{`"a,b"`}, "a,b", nil},
		{"repeated, once quoted", []string{"k1", `"k1"`}, "k1", nil},
		{"joined repeats", []string{`k1, "k1"`}, "k1", nil},
		{"255 characters", []string{long}, long, nil},
		{"256 characters", []string{long + "k"}, "", errKeyTooLong},
		{"missing", nil, "", errKeyMissing},
		{"empty", []string{""}, "", errKeyEmpty},
		{"empty sf-string", []string{`""`}, "", errKeyEmpty},
		{"space inside", []string{`"a b"`}, "", errKeyChars},
		{"not ASCII", []string{"clé"}, "", errKeyChars},
		{"control character", []string{"a\x01b"}, "", errKeyChars},
		{"bad escape", []string{`"a\b"`}, "", errKeyQuote},
		{"unterminated", []string{`"abc`}, "", errKeyQuote},
		{"two keys", []string{"k1", "k2"}, "", errKeyTwo},
		{"two keys joined", []string{"k1,k2"}, "", errKeyTwo},
		{"case differs", []string{"k1", "K1"}, "", errKeyTwo},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseKey(tc.values, KeyOpaque)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				if tc.err != errKeyMissing {
					require.ErrorIs(t, err, errKeyInvalid)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

// The derived ids are documented (a UUID version 5 in a fixed namespace):
// other programs (an operator's script, another language's store) compute
// them, so they never change. Python's uuid.uuid5 gives the same values.
func TestDerivedIDsAreStable(t *testing.T) {
	t.Parallel()
	require.Equal(t, "2c47f4a4-3794-5908-827c-25b3b6db5e9d", SubjectUUID("auth0|6543210fedcba"))
	require.Equal(t, "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01", SubjectUUID("5F0C7D2E-0C1A-4C3B-9A57-2F1E6F2B9D01"))
	require.Empty(t, SubjectUUID(""))
	require.Empty(t, IssuerSubject("https://issuer.example", ""))
}

// TestSubjectIDSpacesAreDisjoint: a subject kept as it is, a subject
// hashed, and a subject qualified by its issuer (or an IAM principal) never
// share an id, even when one subject is the text of another's id.
func TestSubjectIDSpacesAreDisjoint(t *testing.T) {
	victim := SubjectUUID("auth0|victim")
	require.NotEqual(t, victim, SubjectUUID(victim), "a subject that is the text of another's id takes it over")
	require.NotEqual(t, victim, SubjectUUID(strings.ToUpper(victim)))
	require.Equal(t, byte('5'), SubjectUUID(victim)[14], "hashed again, since no subject is kept verbatim as version 5")

	// Versions this package derives (5 and 8) are hashed; others verbatim.
	v8 := derivedUUID("iam", "123456789012", "arn:aws:iam::123456789012:user/worker")
	require.NotEqual(t, v8, SubjectUUID(v8))
	cognito := "5f0c7d2e-0c1a-4c3b-9a57-2f1e6f2b9d01"
	require.Equal(t, cognito, SubjectUUID(cognito))
	require.Equal(t, "0190c5d2-7a3b-7c4d-8e5f-6a7b8c9d0e1f", SubjectUUID("0190C5D2-7A3B-7C4D-8E5F-6A7B8C9D0E1F"), "version 7")

	// An IAM principal keeps the id it had: the derived UUID of its parts.
	principal, err := IAMPrincipal(context.Background(), Request{IAM: &IAMIdentity{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/worker"}})
	require.NoError(t, err)
	require.Equal(t, v8, SubjectUUID(principal))
	require.NotEqual(t, SubjectUUID(principal), SubjectUUID(SubjectUUID(principal)))

	// Issuer and subject together: two issuers' equal subjects are two users,
	// and neither is the plain subject, nor the text of the other's id.
	a := SubjectUUID(IssuerSubject("https://a.example", "42"))
	b := SubjectUUID(IssuerSubject("https://b.example", "42"))
	require.NotEqual(t, a, b)
	require.NotEqual(t, a, SubjectUUID("42"))
	require.NotEqual(t, a, SubjectUUID(a))
	require.Equal(t, a, SubjectUUID(IssuerSubject("https://a.example", "42")), "stable")
	require.NotEqual(t, SubjectUUID(IssuerSubject("https://a.example/4", "2")), a, "the parts are framed")
	// The qualified form's text without its mark is an ordinary subject.
	forged := strings.TrimPrefix(IssuerSubject("https://a.example", "42"), "\xff")
	require.NotEqual(t, a, SubjectUUID(forged))
	require.Equal(t, byte('5'), SubjectUUID(forged)[14])
	require.NotEqual(t, SubjectUUID("auth0|x"), SubjectUUID("Auth0|x"), "subjects compare exactly")

	const key = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	require.Equal(t, key, RecordKey("", KeyUUIDv4, key), "ADR 009's keys are kept as they are")
	require.Equal(t, "32bbed58-aac6-55ba-a30e-9fc9e152c457", RecordKey("orders", KeyUUIDv4, key))
	require.Equal(t, RecordKey("orders", KeyUUIDv4, key), RecordKey("orders", KeyOpaque, key), "the name is prefix:key in both formats")
	require.NotEqual(t, RecordKey("", KeyOpaque, "a"), RecordKey("", KeyOpaque, "A"))
	require.True(t, isUUID(RecordKey("", KeyOpaque, strings.Repeat("x", 255))))

	userID, scoped, err := FunctionRecordID("", "charge-order", "", "ord-1842")
	require.NoError(t, err)
	require.Equal(t, scopeID("charge-order", ""), userID, "no prefix: the records of earlier versions")
	require.Equal(t, keyID("ord-1842"), scoped)
	prefixed, _, err := FunctionRecordID("billing", "charge-order", "", "ord-1842")
	require.NoError(t, err)
	require.NotEqual(t, userID, prefixed)
	_, _, err = FunctionRecordID("", "charge-order", "", "")
	require.Error(t, err, "a function's key is never empty")
	_, _, err = FunctionRecordID("a:b", "charge-order", "", "ord-1842")
	require.Error(t, err, "a prefix holds no colon")
}

func TestHTTPRecordID(t *testing.T) {
	t.Parallel()
	user, key, err := HTTPRecordID("", KeyUUIDv4, "auth0|6543210fedcba", `"8E03978E-40D5-43E8-BC93-6894A57F9324"`)
	require.NoError(t, err)
	require.Equal(t, SubjectUUID("auth0|6543210fedcba"), user)
	require.Equal(t, "8e03978e-40d5-43e8-bc93-6894a57f9324", key)
	_, _, err = HTTPRecordID("", KeyUUIDv4, "auth0|x", "order-1")
	require.ErrorContains(t, err, "not a UUID version 4")
	_, key, err = HTTPRecordID("", KeyOpaque, "auth0|x", "order-1")
	require.NoError(t, err)
	require.Equal(t, RecordKey("", KeyOpaque, "order-1"), key)
	_, _, err = HTTPRecordID("", KeyUUIDv4, "", "8e03978e-40d5-43e8-bc93-6894a57f9324")
	require.Error(t, err)
}

func TestKeyOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{Key: HeaderKey("Idempotency Key")}, "Config.Key"},
		{Config{KeyFormat: 7}, "Config.KeyFormat is KeyFormat(7)"},
		{Config{Settings: Settings{KeyPrefix: "a:b"}}, "Config.KeyPrefix"},
		{Config{Settings: Settings{KeyPrefix: strings.Repeat("p", 65)}}, "at most 64"},
	} {
		tc.cfg.Store = nil
		err := tc.cfg.withDefaults().validate()
		require.ErrorContains(t, err, tc.want)
	}
	require.ErrorContains(t, FunctionConfig[int]{Settings: Settings{KeyPrefix: "a b"}}.withDefaults().validate(), "FunctionConfig.KeyPrefix")
}

// Each invalid setting is reported once, naming the field as the caller
// wrote it, on Config and FunctionConfig alike.
func TestEachInvalidSettingIsReportedOnce(t *testing.T) {
	t.Parallel()
	bad := Settings{TTL: -time.Second, KeyPrefix: "a:b", WaitForResult: -time.Second}
	msg := Config{KeyFormat: 7, Key: HeaderKey("Idem Key"), Settings: bad}.withDefaults().validate().Error()
	for _, field := range []string{"Config.Store", "Config.KeyFormat", "Config.Key", "Config.TTL", "Config.KeyPrefix", "Config.WaitForResult"} {
		require.Equal(t, 1, strings.Count(msg, field+" is"), "%s in: %s", field, msg)
	}
	msg = FunctionConfig[int]{Settings: bad}.withDefaults().validate().Error()
	for _, field := range []string{"FunctionConfig.Store", "FunctionConfig.Name", "FunctionConfig.Key", "FunctionConfig.TTL", "FunctionConfig.KeyPrefix", "FunctionConfig.WaitForResult"} {
		require.Equal(t, 1, strings.Count(msg, field+" is"), "%s in: %s", field, msg)
	}
}
