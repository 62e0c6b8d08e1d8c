package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
)

func TestIAMPrincipal(t *testing.T) {
	t.Parallel()
	user := func(arn string) string {
		sub, err := idempotency.IAMPrincipal(context.Background(), idempotency.Request{IAM: &idempotency.IAMIdentity{AccountID: "123456789012", UserARN: arn}})
		require.NoError(t, err)
		return idempotency.SubjectUUID(sub)
	}
	a := user("arn:aws:sts::123456789012:assumed-role/Worker/session-1")
	require.Len(t, a, 36)
	_, err := uuid.Parse(a)
	require.NoError(t, err)
	require.Equal(t, a, user("arn:aws:sts::123456789012:assumed-role/Worker/session-1"), "stable")
	// IAM Identity Center signs every user of a permission set with one
	// role and a session of their own: the session is who the caller is.
	require.NotEqual(t, user("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_0123/alice@example.com"),
		user("arn:aws:sts::123456789012:assumed-role/AWSReservedSSO_Dev_0123/bob@example.com"), "two sessions of one role are two users")
	require.NotEqual(t, a, user("arn:aws:sts::123456789012:assumed-role/Worker/session-2"))
	require.NotEqual(t, a, user("arn:aws:sts::123456789012:assumed-role/Worker"))
	require.NotEqual(t, a, user("arn:aws:sts::123456789012:assumed-role/Other/session-1"))
	require.NotEqual(t, a, user("arn:aws:iam::123456789012:user/worker"))
	require.NotEqual(t, a, idempotency.SubjectUUID(a), "a subject that is the text of a principal's id is another user")
	none, err := idempotency.IAMPrincipal(context.Background(), idempotency.Request{})
	require.NoError(t, err)
	require.Empty(t, none, "no IAM identity, no user")
}

func TestBearerTokenAndALBOIDC(t *testing.T) {
	t.Parallel()
	sub := uuid.NewString()
	errBad := errors.New("bad signature")
	verify := func(_ context.Context, token string) (string, error) {
		if token != "good" {
			return "", errBad
		}
		return sub, nil
	}
	bearer := idempotency.BearerToken(verify)
	for _, tc := range []struct {
		header []string
		want   string
		err    error
	}{
		{nil, "", nil},
		{[]string{"Bearer good"}, sub, nil},
		{[]string{"bearer   good "}, sub, nil},
		{[]string{"Basic good"}, "", nil},
		{[]string{"Bearer "}, "", nil},
		{[]string{"Bearer good", "Bearer good"}, sub, nil}, // a REST API event's two header maps
		{[]string{"Bearer good", "Bearer other"}, "", nil},
		{[]string{"Bearer forged"}, "", errBad},
	} {
		got, err := bearer(context.Background(), idempotency.Request{Headers: map[string][]string{"authorization": tc.header}})
		require.ErrorIs(t, err, tc.err)
		require.Equal(t, tc.want, got, "%q", tc.header)
	}
	alb := idempotency.ALBOIDC(verify)
	got, err := alb(context.Background(), idempotency.Request{Headers: map[string][]string{idempotency.ALBOIDCDataHeader: {"good"}}})
	require.NoError(t, err)
	require.Equal(t, sub, got)
	got, err = alb(context.Background(), idempotency.Request{Headers: map[string][]string{"x-amzn-oidc-identity": {sub}}})
	require.NoError(t, err)
	require.Empty(t, got, "the unsigned identity header alone counts for nothing")
	_, err = alb(context.Background(), idempotency.Request{Headers: map[string][]string{idempotency.ALBOIDCDataHeader: {"forged"}}})
	require.ErrorIs(t, err, errBad)
}

// A Function URL handler keyed by its IAM caller: the retry replays, and an
// unsigned request is refused.
func TestWrapFunctionURLWithIAM(t *testing.T) {
	t.Parallel()
	runs := 0
	h, err := idempotency.Wrap(func(context.Context, events.LambdaFunctionURLRequest) (events.LambdaFunctionURLResponse, error) {
		runs++
		return events.LambdaFunctionURLResponse{StatusCode: http.StatusCreated, Body: `{"ok":true}`, Cookies: []string{"a=1"}}, nil
	}, quiet(idempotency.Config{Store: newMemStore(), Subject: idempotency.IAMPrincipal}))
	require.NoError(t, err)
	req := events.LambdaFunctionURLRequest{RawPath: "/jobs", Headers: map[string]string{"idempotency-key": uuid.NewString()}, Body: `{}`}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{
		IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:sts::123456789012:assumed-role/Caller/one"},
	}
	first, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, []string{"a=1"}, first.Cookies)
	replay, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, first.Body, replay.Body)
	require.Equal(t, "true", replay.Headers[idempotency.ReplayedHeader])
	require.Equal(t, 1, runs)
	// Another session of the same role is another caller: its request with
	// the same key is its own, never the first session's replay.
	req.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/Caller/two"
	other, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Empty(t, other.Headers[idempotency.ReplayedHeader])
	require.Equal(t, 2, runs)
	req.RequestContext.Authorizer.IAM.UserARN = "arn:aws:sts::123456789012:assumed-role/Caller/one"
	req.RequestContext.Authorizer = nil
	refused, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusUnauthorized, refused.StatusCode)
}

// An ALB target's refusals and replays carry the status description the
// load balancer needs, in both header forms.
func TestWrapALB(t *testing.T) {
	t.Parallel()
	sub := uuid.NewString()
	h, err := idempotency.Wrap(func(context.Context, events.ALBTargetGroupRequest) (events.ALBTargetGroupResponse, error) {
		return events.ALBTargetGroupResponse{StatusCode: http.StatusCreated, StatusDescription: "201 Created", Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"ok":true}`}, nil
	}, quiet(idempotency.Config{Store: newMemStore(), Subject: idempotency.ALBOIDC(func(context.Context, string) (string, error) { return sub, nil })}))
	require.NoError(t, err)
	req := events.ALBTargetGroupRequest{HTTPMethod: http.MethodPost, Path: "/tasks", Body: `{}`,
		Headers: map[string]string{"idempotency-key": uuid.NewString(), idempotency.ALBOIDCDataHeader: "eyJ..."}}
	_, err = h(context.Background(), req)
	require.NoError(t, err)
	replay, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "201 Created", replay.StatusDescription)
	require.Equal(t, "true", replay.Headers[idempotency.ReplayedHeader])
	require.Equal(t, []string{"true"}, replay.MultiValueHeaders[idempotency.ReplayedHeader])
	delete(req.Headers, "idempotency-key")
	refused, err := h(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, "400 Bad Request", refused.StatusDescription)
	require.Equal(t, "application/problem+json", refused.Headers["Content-Type"])
}
