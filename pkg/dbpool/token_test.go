package dbpool

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/stretchr/testify/require"
)

// TestAuthTokensAreReused: new connections share one signed token for ten
// of its fifteen minutes, then get a new one; credentials that expire
// sooner renew it sooner; a failed signing is not kept.
func TestAuthTokensAreReused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	start := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	now := start
	var calls int
	expires := time.Time{} // zero: credentials that do not expire
	var fail error
	tokens := &authTokens{
		endpoint: "proxy.example:5432", region: "eu-west-1", user: "app",
		creds: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			if fail != nil {
				return aws.Credentials{}, fail
			}
			calls++
			return aws.Credentials{
				AccessKeyID: "AKIDTESTEXAMPLE", SecretAccessKey: "test-secret-key", SessionToken: fmt.Sprintf("session-%d", calls),
				CanExpire: !expires.IsZero(), Expires: expires,
			}, nil
		}),
		now: func() time.Time { return now },
	}

	first, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Contains(t, first, "X-Amz-Security-Token=session-1")
	now = start.Add(tokenReuse - time.Second)
	again, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Equal(t, first, again, "reused within ten minutes")
	require.Equal(t, 1, calls, "signed once")

	now = start.Add(tokenReuse)
	renewed, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Contains(t, renewed, "X-Amz-Security-Token=session-2", "renewed at ten minutes, five before it expires")

	// Credentials expiring in seven minutes: the token they sign is renewed
	// five minutes before they expire, after two.
	start = now.Add(tokenReuse)
	now, expires = start, start.Add(7*time.Minute)
	short, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Contains(t, short, "session-3")
	now = start.Add(2*time.Minute - time.Second)
	same, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Equal(t, short, same)
	now, expires = start.Add(2*time.Minute), time.Time{}
	next, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Contains(t, next, "session-4")

	// A failure to sign is returned and not kept.
	now = now.Add(tokenReuse)
	fail = errors.New("no role")
	_, err = tokens.get(ctx)
	require.ErrorContains(t, err, "no role")
	fail = nil
	after, err := tokens.get(ctx)
	require.NoError(t, err)
	require.Contains(t, after, "session-5")
}
