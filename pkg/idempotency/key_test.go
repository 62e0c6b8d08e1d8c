package idempotency

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const (
	keyA = "8e03978e-40d5-43e8-bc93-6894a57f9324"
	keyB = "1b4e28ba-2fa1-41d2-883f-0016d3cca427"
)

func TestParseKey(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		values []string
		want   string // "" with err
		err    error
	}{
		{"bare", []string{keyA}, keyA, nil},
		{"upper case is lowered", []string{strings.ToUpper(keyA)}, keyA, nil},
		{"sf-string", []string{`"` + keyA + `"`}, keyA, nil},
		{"surrounding white space", []string{" \t" + keyA + " "}, keyA, nil},
		{"sf-string with surrounding white space", []string{` "` + keyA + `" `}, keyA, nil},
		{"variant 8", []string{"8e03978e-40d5-43e8-8c93-6894a57f9324"}, "8e03978e-40d5-43e8-8c93-6894a57f9324", nil},
		{"variant B", []string{"8e03978e-40d5-43e8-Bc93-6894a57f9324"}, "8e03978e-40d5-43e8-bc93-6894a57f9324", nil},
		{"same key twice", []string{keyA, `"` + strings.ToUpper(keyA) + `"`}, keyA, nil},
		{"same key joined", []string{keyA + ", " + keyA}, keyA, nil},

		{"missing", nil, "", errKeyMissing},
		{"no values", []string{}, "", errKeyMissing},
		{"empty", []string{""}, "", errKeyInvalid},
		{"blank", []string{"  "}, "", errKeyInvalid},
		{"empty sf-string", []string{`""`}, "", errKeyInvalid},
		{"lone quote", []string{`"`}, "", errKeyInvalid},
		{"garbage", []string{"hello"}, "", errKeyInvalid},
		{"version 1", []string{"8e03978e-40d5-13e8-bc93-6894a57f9324"}, "", errKeyInvalid},
		{"version 7", []string{"018f3c8e-40d5-73e8-bc93-6894a57f9324"}, "", errKeyInvalid},
		{"nil uuid", []string{"00000000-0000-0000-0000-000000000000"}, "", errKeyInvalid},
		{"variant 0", []string{"8e03978e-40d5-43e8-0c93-6894a57f9324"}, "", errKeyInvalid},
		{"variant c (Microsoft)", []string{"8e03978e-40d5-43e8-cc93-6894a57f9324"}, "", errKeyInvalid},
		{"no hyphens", []string{"8e03978e40d543e8bc936894a57f9324"}, "", errKeyInvalid},
		{"braces", []string{"{" + keyA + "}"}, "", errKeyInvalid},
		{"urn", []string{"urn:uuid:" + keyA}, "", errKeyInvalid},
		{"hyphen moved", []string{"8e03978e4-0d5-43e8-bc93-6894a57f9324"}, "", errKeyInvalid},
		{"non-hex", []string{"8e03978e-40d5-43e8-bc93-6894a57f932g"}, "", errKeyInvalid},
		{"too long", []string{keyA + "0"}, "", errKeyInvalid},
		{"unterminated sf-string", []string{`"` + keyA}, "", errKeyInvalid},
		{"space inside sf-string", []string{`"` + keyA + ` "`}, "", errKeyInvalid},
		{"escaped sf-string", []string{`"\` + keyA + `"`}, "", errKeyInvalid},
		{"sf-token, not string", []string{`'` + keyA + `'`}, "", errKeyInvalid},
		{"two different values", []string{keyA, keyB}, "", errKeyInvalid},
		{"two different values joined", []string{keyA + "," + keyB}, "", errKeyInvalid},
		{"trailing comma", []string{keyA + ","}, "", errKeyInvalid},
		{"one valid one empty", []string{keyA, ""}, "", errKeyInvalid},
		{"parameters", []string{keyA + ";a=1"}, "", errKeyInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseKey(tc.values, KeyUUIDv4)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				require.Empty(t, got)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestIsUUIDAcceptsAnyVersion(t *testing.T) {
	t.Parallel()
	require.True(t, isUUID("018F3C8E-40D5-73E8-BC93-6894A57F9324"))
	require.True(t, isUUID("00000000-0000-0000-0000-000000000000"))
	require.False(t, isUUID("018f3c8e-40d5-73e8-bc93-6894a57f932"))
	require.False(t, isUUID("018f3c8e_40d5-73e8-bc93-6894a57f9324"))
}
