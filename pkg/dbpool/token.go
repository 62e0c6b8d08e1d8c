package dbpool

import (
	"context"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/rds/auth"
)

// An IAM auth token is valid for 15 minutes from its signing. New
// connections reuse one token for tokenReuse; the rest of its lifetime is
// the margin for a connection attempt that starts just before the
// deadline, and for clock skew.
const (
	tokenLifetime = 15 * time.Minute
	tokenReuse    = 10 * time.Minute
	tokenMargin   = tokenLifetime - tokenReuse
)

// authTokens signs the IAM auth tokens of one pool and hands the same one to
// every new connection until it is due for renewal. A token may log in any
// number of connections while it is valid. Signing one per connection would
// cost a credential lookup and a signature each time. AWS advises IAM
// authentication for fewer than 200 new connections a second.
type authTokens struct {
	endpoint, region, user string
	creds                  aws.CredentialsProvider
	// now is the clock. Defaults to time.Now.
	now func() time.Time

	mu      sync.Mutex
	token   string
	renewAt time.Time
}

// get returns the token to log in with, signing a new one when there is
// none yet or the last one is due for renewal. A failed signing is not
// kept: the next connection tries again.
func (a *authTokens) get(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := time.Now()
	if a.now != nil {
		now = a.now()
	}
	if a.token != "" && now.Before(a.renewAt) {
		return a.token, nil
	}
	creds, err := a.creds.Retrieve(ctx)
	if err != nil {
		return "", err
	}
	token, err := auth.BuildAuthToken(ctx, a.endpoint, a.region, a.user, aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return creds, nil
	}))
	if err != nil {
		return "", err
	}
	// A token signed with temporary credentials stops working when they
	// expire, whatever its own lifetime.
	renewAt := now.Add(tokenReuse)
	if creds.CanExpire && creds.Expires.Add(-tokenMargin).Before(renewAt) {
		renewAt = creds.Expires.Add(-tokenMargin)
	}
	a.token, a.renewAt = token, renewAt
	return token, nil
}
