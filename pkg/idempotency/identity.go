package idempotency

import (
	"context"
	"errors"
	"slices"
	"strings"
)

// The user extractors below are for the shapes that have no API Gateway
// authorizer: Lambda Function URLs, ALB targets, plain HTTP servers. Each
// reads only an identity that something trusted established (IAM's SigV4
// check, the load balancer's authentication, a verifier the caller gives),
// never a header or a body field that a client could simply set.

// IAMPrincipal is the SubjectFunc of a Lambda Function URL with AuthType
// AWS_IAM: the user is the IAM principal that signed the request, by its
// account and whole ARN. For an assumed role that ends with the session
// name, so two sessions of one role are two users (see docs/library.md).
// A request without an IAM identity has no user (401).
func IAMPrincipal(_ context.Context, req Request) (string, error) {
	if req.IAM == nil || req.IAM.AccountID == "" || req.IAM.UserARN == "" {
		return "", nil
	}
	return qualified("iam", req.IAM.AccountID, req.IAM.UserARN), nil
}

// distinct returns values without repeats, in their order. A REST API
// (payload 1.0) event carries every header in both "headers" and
// "multiValueHeaders", so one header sent once arrives as two equal values.
func distinct(values []string) []string {
	if len(values) < 2 {
		return values
	}
	out := values[:1:1]
	for _, v := range values[1:] {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// BearerToken returns a SubjectFunc that reads the subject of an
// "Authorization: Bearer <token>" header that no authorizer checked.
//
// It serves a Function URL with AuthType NONE, an ALB target or a plain
// HTTP server. Verify checks the token (signature, issuer, audience,
// expiry) and returns the user's subject. No token, or two different ones,
// is no user (401). So is an error from verify, which is logged.
func BearerToken(verify func(ctx context.Context, token string) (string, error)) SubjectFunc {
	return func(ctx context.Context, req Request) (string, error) {
		values := distinct(req.Header("Authorization"))
		if len(values) != 1 {
			return "", nil
		}
		scheme, token, ok := strings.Cut(strings.TrimSpace(values[0]), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
			return "", nil
		}
		return verify(ctx, strings.TrimSpace(token))
	}
}

// ALBOIDCDataHeader is the header in which an Application Load Balancer's
// authenticate-oidc or authenticate-cognito action passes the user's claims. It
// is a JWT the load balancer signs (ES256, its key published per region).
const ALBOIDCDataHeader = "x-amzn-oidc-data"

// ALBOIDC returns the SubjectFunc of an ALB target behind a listener rule
// that authenticates users (authenticate-oidc or authenticate-cognito).
//
// Verify checks the x-amzn-oidc-data JWT's signature against the load
// balancer's public key, and its signer field against the load balancer's
// ARN. It returns the user's subject, a Cognito sub or any other
// provider's. The claims are only ever trusted
// after that check, since a target reachable other than through the rule
// receives whatever headers the client sent. A request without the header
// has no user (401).
func ALBOIDC(verify func(ctx context.Context, oidcData string) (string, error)) SubjectFunc {
	return func(ctx context.Context, req Request) (string, error) {
		values := distinct(req.Header(ALBOIDCDataHeader))
		switch len(values) {
		case 0:
			return "", nil
		case 1:
			return verify(ctx, values[0])
		}
		return "", errors.New("more than one x-amzn-oidc-data header")
	}
}

// StaticSubject returns a SubjectFunc that gives every request the same
// subject, id.
//
// It is for an endpoint with no caller identity at all: a webhook receiver
// that checks the sender's signature itself, or an internal service behind
// a private network. Every caller then shares the keys, so two callers
// sending the same key get one answer. Use it only where the
// keys are unique by construction (the sender's delivery ids).
func StaticSubject(id string) SubjectFunc {
	return func(context.Context, Request) (string, error) { return id, nil }
}
