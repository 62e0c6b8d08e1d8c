package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
)

// TestUserID prints, for any subject, the user id the library keeps for
// it (idempotency.SubjectUUID, whatever its mapping), with -issuer the id
// of idempotency.IssuerSubject's pair, and refuses no subject or two.
func TestUserID(t *testing.T) {
	t.Parallel()
	userID := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(context.Background(), append([]string{"user-id"}, args...), &out, func(string) string { return "" })
		return out.String(), err
	}
	for _, sub := range []string{
		"auth0|6543210fedcba",
		"google-oauth2|104729",
		strings.ToUpper(uuid.NewString()), // a Cognito sub, as some tools print it
		uuid.NewString(),
	} {
		out, err := userID(sub)
		require.NoError(t, err, sub)
		require.Equal(t, idempotency.SubjectUUID(sub)+"\n", out, sub)
	}
	out, err := userID("--", "-starts-with-a-dash")
	require.NoError(t, err)
	require.Equal(t, idempotency.SubjectUUID("-starts-with-a-dash")+"\n", out)

	// A subject of one issuer among several: the pair's id, not the
	// subject's alone.
	iss := "https://login.example.com/"
	out, err = userID("-issuer", iss, "auth0|6543210fedcba")
	require.NoError(t, err)
	require.Equal(t, idempotency.SubjectUUID(idempotency.IssuerSubject(iss, "auth0|6543210fedcba"))+"\n", out)
	require.NotEqual(t, idempotency.SubjectUUID("auth0|6543210fedcba")+"\n", out)

	out, err = userID("-tenant", "acme", "auth0|6543210fedcba")
	require.NoError(t, err)
	require.Equal(t, idempotency.TenantUserID("acme", idempotency.SubjectUUID("auth0|6543210fedcba"))+"\n", out)

	_, err = userID()
	require.ErrorContains(t, err, "one subject")
	_, err = userID("a", "b")
	require.ErrorContains(t, err, "one subject")
	_, err = userID("")
	require.ErrorContains(t, err, "empty")
}
