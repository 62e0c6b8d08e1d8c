package main

import (
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/ichido/ichido/pkg/idempotency"
)

// runUserID prints the user id the stores keep for a subject
// (idempotency.SubjectUUID): what the logs' user field and a record's
// user_id hold, so that an operator can tell which customer they are.
func runUserID(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("keystore user-id", flag.ContinueOnError)
	fs.SetOutput(out)
	issuer := fs.String("issuer", "", "the token's issuer (iss), when the handler's user is idempotency.IssuerSubject(issuer, subject)")
	tenant := fs.String("tenant", "", "the run's tenant: the id its records are kept under (idempotency.TenantUserID)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: keystore user-id [-issuer ISS] [-tenant T] SUBJECT\n\nprints the user id the stores keep for SUBJECT, the authorizer's sub claim (a UUID, or auth0|…)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return fmt.Errorf("user-id takes one subject, got %d arguments (usage: keystore user-id [-issuer ISS] [-tenant T] SUBJECT)", fs.NArg())
	}
	id := idempotency.SubjectUUID(subjectOf(*issuer, fs.Arg(0)))
	if id == "" {
		return errors.New("the subject is empty")
	}
	fmt.Fprintln(out, idempotency.TenantUserID(*tenant, id))
	return nil
}

// subjectOf is the subject a handler's Subject returns for sub: sub itself,
// or with an issuer the pair (idempotency.IssuerSubject).
func subjectOf(issuer, sub string) string {
	if issuer == "" {
		return sub
	}
	return idempotency.IssuerSubject(issuer, sub)
}
