package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// The shapes without an authorizer's claims carry the case's user where that
// shape's own identity arrives. That is a Function URL's IAM principal, or an
// ALB's OIDC identity header. The payload reads it from there as the claims the
// table's extractors expect. A Lambda authorizer's context has no place in
// them, so its case is left out.
var noLambdaAuthorizer = map[string]bool{"a Lambda authorizer's context gives the user through an extractor": true}

// wrapShape is wrapVersion for a shape whose user is not in Claims: claims
// gives the claims the shape's request carries.
func wrapShape[Req idempotency.AnyRequest, Resp apigw.AnyResponse](event func(request) Req, claims func(idempotency.Request) map[string]string) func(*testing.T, handler, idempotency.Config) invoker {
	inner := wrapVersion[Req, Resp](event)
	return func(t *testing.T, h handler, cfg idempotency.Config) invoker {
		userID := cfg.Subject
		if userID == nil {
			userID = idempotency.ClaimsSubject
		}
		cfg.Subject = func(ctx context.Context, req idempotency.Request) (string, error) {
			req.Claims = claims(req)
			return userID(ctx, req)
		}
		return inner(t, h, cfg)
	}
}

func functionURLEvent(r request) events.LambdaFunctionURLRequest {
	v2 := v2Event(r)
	e := events.LambdaFunctionURLRequest{
		Version:         "2.0",
		RawPath:         v2.RawPath,
		RawQueryString:  v2.RawQueryString,
		Headers:         v2.Headers,
		Body:            v2.Body,
		IsBase64Encoded: v2.IsBase64Encoded,
	}
	e.RequestContext.HTTP.Method = r.method
	e.RequestContext.HTTP.Path = r.path
	e.RequestContext.RequestID = uuid.NewString()
	if r.sub != "" {
		arn := r.arn
		if arn == "" {
			arn = "arn:aws:iam::123456789012:user/caller"
		}
		e.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{
			IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{
				AccountID: "123456789012",
				UserARN:   arn,
				UserID:    r.sub,
			},
		}
	}
	return e
}

func functionURLClaims(req idempotency.Request) map[string]string {
	if req.IAM == nil {
		return nil
	}
	return map[string]string{"sub": req.IAM.UserID}
}

// albOIDCIdentity is the header in which an ALB's authenticate-oidc or
// authenticate-cognito action passes the user's sub.
const albOIDCIdentity = "x-amzn-oidc-identity"

func albEvent(r request) events.ALBTargetGroupRequest {
	e := events.ALBTargetGroupRequest{
		HTTPMethod:      r.method,
		Path:            r.path,
		Body:            r.body,
		IsBase64Encoded: r.b64,
	}
	e.RequestContext.ELB.TargetGroupArn = "arn:aws:elasticloadbalancing:eu-west-1:123456789012:targetgroup/tasks/0123456789abcdef"
	// An ALB passes the query as written, names and values still encoded.
	if r.query != "" {
		e.MultiValueQueryStringParameters = map[string][]string{}
		for part := range strings.SplitSeq(r.query, "&") {
			name, value, _ := strings.Cut(part, "=")
			e.MultiValueQueryStringParameters[name] = append(e.MultiValueQueryStringParameters[name], value)
		}
	}
	e.MultiValueHeaders = map[string][]string{}
	for name, v := range r.headers {
		e.MultiValueHeaders[strings.ToLower(name)] = append(e.MultiValueHeaders[strings.ToLower(name)], v)
	}
	for name, vs := range r.multi {
		e.MultiValueHeaders[strings.ToLower(name)] = append(e.MultiValueHeaders[strings.ToLower(name)], vs...)
	}
	if r.sub != "" {
		e.MultiValueHeaders[albOIDCIdentity] = []string{r.sub}
	}
	return e
}

func albClaims(req idempotency.Request) map[string]string {
	if sub := req.Header(albOIDCIdentity); len(sub) == 1 {
		return map[string]string{"sub": sub[0]}
	}
	return nil
}
