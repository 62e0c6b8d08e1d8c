// Command token prints a bearer token for a local user of the task API: an
// access token shaped like a Cognito user pool's (sub, iss, client_id,
// token_use, scope, auth_time, iat, exp, jti, username), signed HS256 with a
// key that is not a secret. Only the local API (make run) accepts it: it
// reads tokens without verifying them, and API Gateway would refuse this
// one. It is what `make token SUB=<subject>` runs.
//
//	token [-sub <subject>] [-ttl 12h] [-expired]
//
// The subject is a UUID, as Cognito's sub is, or any other identity
// provider's (`make token SUB='auth0|6543210fedcba'`): the task API keys
// such a user on its name-based UUID (idempotency.SubjectUUID).
//
// Without -sub a new random user id is made and printed on standard error.
// With -expired the token was issued -ttl and a minute ago, so it expired a
// minute ago: the local gateway, like API Gateway's JWT authorizer, answers
// it with 401 {"message":"Unauthorized"} (`make token EXPIRED=1`).
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/pkg/idempotency"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "token:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	sub := fs.String("sub", "", "the user's subject (a UUID, as Cognito's sub is, or another provider's, such as auth0|…); a random UUID when empty")
	ttl := fs.Duration("ttl", 12*time.Hour, "how long the token is valid")
	expired := fs.Bool("expired", false, "make a token that expired a minute ago, to try the gateway's 401")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *ttl <= 0 {
		return fmt.Errorf("-ttl must be positive, got %s (-expired makes an expired token)", *ttl)
	}
	if *sub == "" {
		*sub = uuid.NewString()
		fmt.Fprintf(stderr, "token: for a new user, sub=%s\n", *sub)
	} else if _, err := uuid.Parse(*sub); err != nil {
		// Another identity provider's subject (auth0|…, a Google id): the
		// task API and the key store both key on its name-based UUID.
		fmt.Fprintf(stderr, "token: sub %q is not a UUID; the task API keeps it as the user id %s\n", *sub, idempotency.SubjectUUID(*sub))
	}
	opts := localapi.TokenOptions{Subject: *sub, TTL: *ttl}
	if *expired {
		opts.Now = time.Now().Add(-*ttl - time.Minute)
	}
	tok, err := localapi.NewToken(opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, tok)
	return nil
}
