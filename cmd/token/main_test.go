package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/pkg/idempotency"
)

func TestToken(t *testing.T) {
	t.Parallel()
	sub := "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"
	var stdout, stderr bytes.Buffer
	require.NoError(t, run([]string{"-sub", sub, "-ttl", "1h"}, &stdout, &stderr))
	require.Empty(t, stderr.String())
	id, err := localapi.Authorize("Bearer "+strings.TrimSpace(stdout.String()), time.Now())
	require.NoError(t, err)
	require.Equal(t, sub, id.Claims["sub"])
	require.Equal(t, "access", id.Claims["token_use"])
	require.NotEmpty(t, id.Claims["iss"])
	require.NotEmpty(t, id.Claims["client_id"])
	_, err = localapi.Authorize("Bearer "+strings.TrimSpace(stdout.String()), time.Now().Add(61*time.Minute))
	require.ErrorIs(t, err, localapi.ErrTokenExpired)

	stdout.Reset()
	require.NoError(t, run(nil, &stdout, &stderr))
	id, err = localapi.Authorize(strings.TrimSpace(stdout.String()), time.Now())
	require.NoError(t, err)
	_, err = uuid.Parse(id.Claims["sub"])
	require.NoError(t, err, "without -sub a new user id is made")
	require.Contains(t, stderr.String(), id.Claims["sub"], "and told")

	stderr.Reset()
	stdout.Reset()
	require.NoError(t, run([]string{"-sub", "auth0|6543210fedcba"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), idempotency.SubjectUUID("auth0|6543210fedcba"), "the user id it is kept as")
	id, err = localapi.Authorize("Bearer "+strings.TrimSpace(stdout.String()), time.Now())
	require.NoError(t, err)
	require.Equal(t, "auth0|6543210fedcba", id.Claims["sub"])
	err = run([]string{"-ttl", "-1h"}, &stdout, &stderr)
	require.ErrorContains(t, err, "-expired", "a negative -ttl points at -expired")

	require.Error(t, run([]string{"extra"}, &stdout, &stderr))
}

// TestExpiredToken: -expired makes a token that the local gateway's JWT
// authorizer refuses as expired, while the same token without -expired is
// accepted.
func TestExpiredToken(t *testing.T) {
	t.Parallel()
	sub := uuid.NewString()
	var stdout, stderr bytes.Buffer
	require.NoError(t, run([]string{"-sub", sub, "-expired"}, &stdout, &stderr))
	tok := strings.TrimSpace(stdout.String())
	_, err := localapi.Authorize("Bearer "+tok, time.Now())
	require.ErrorIs(t, err, localapi.ErrTokenExpired)
	_, err = localapi.Authorize("Bearer "+tok, time.Now().Add(-2*time.Minute))
	require.NoError(t, err, "it was valid until a minute ago")

	stdout.Reset()
	require.NoError(t, run([]string{"-sub", sub, "-expired", "-ttl", "5m"}, &stdout, &stderr))
	_, err = localapi.Authorize("Bearer "+strings.TrimSpace(stdout.String()), time.Now())
	require.ErrorIs(t, err, localapi.ErrTokenExpired)
}
