package apigw_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/apigw"
)

func TestFromFunctionURLRequest(t *testing.T) {
	t.Parallel()
	r := events.LambdaFunctionURLRequest{RawPath: "/a%20b", RawQueryString: "x=1&x=2&y=%zz", Headers: map[string]string{"Idempotency-Key": "k"}, Body: "{}"}
	r.RequestContext.HTTP.Method = "post"
	r.RequestContext.RequestID = "req-1"
	r.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{
		IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/u", UserID: "AIDA"},
	}
	v := apigw.FromRequest(r)
	require.Equal(t, "POST", v.Method)
	require.Equal(t, "/a%20b", v.Path)
	require.Equal(t, url.Values{"x": {"1", "2"}, "y": {"%zz"}}, v.Query)
	require.Equal(t, "x=1&x=2&y=%zz", v.RawQuery)
	require.Equal(t, []string{"k"}, v.Header("idempotency-key"))
	require.Equal(t, &apigw.IAMIdentity{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/u", UserID: "AIDA"}, v.IAM)
	require.Nil(t, v.Claims)
}

func TestFromALBRequestDecodesTheQuery(t *testing.T) {
	t.Parallel()
	r := events.ALBTargetGroupRequest{HTTPMethod: "PATCH", Path: "/tasks/1",
		MultiValueQueryStringParameters: map[string][]string{"b": {"x%20y", "z"}, "a%2B": {"1"}},
		MultiValueHeaders:               map[string][]string{"Idempotency-Key": {"k1", "k2"}}}
	v := apigw.FromRequest(r)
	require.Equal(t, url.Values{"a+": {"1"}, "b": {"x y", "z"}}, v.Query)
	require.Equal(t, "a%2B=1&b=x%20y&b=z", v.RawQuery)
	require.Equal(t, []string{"k1", "k2"}, v.Header("Idempotency-Key"))
	single := apigw.FromRequest(events.ALBTargetGroupRequest{HTTPMethod: "GET", QueryStringParameters: map[string]string{"q": "a%26b"}})
	require.Equal(t, url.Values{"q": {"a&b"}}, single.Query)
}

func TestToALBAndFunctionURLResponses(t *testing.T) {
	t.Parallel()
	resp := apigw.Response{StatusCode: 201, Headers: http.Header{"Content-Type": {"application/json"}, "Set-Cookie": {"a=1", "b=2"}}, Body: "{}"}
	alb := apigw.ToResponse[events.ALBTargetGroupResponse](resp)
	require.Equal(t, "201 Created", alb.StatusDescription)
	require.Equal(t, "application/json", alb.Headers["Content-Type"])
	require.Equal(t, []string{"a=1", "b=2"}, alb.MultiValueHeaders["Set-Cookie"])
	require.Equal(t, resp.Headers, apigw.FromResponse(alb).Headers)
	url := apigw.ToResponse[events.LambdaFunctionURLResponse](resp)
	require.Equal(t, []string{"a=1", "b=2"}, url.Cookies)
	require.Equal(t, resp.Headers, apigw.FromResponse(url).Headers)
}

func TestFromHTTPRequest(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("post", "/tasks/a%2Fb?z=1&a=%zz", nil)
	r.Header.Add("Idempotency-Key", "k1")
	r.Header.Add("Idempotency-Key", "k2")
	v := apigw.FromHTTPRequest(r, []byte{0xff, 0x00})
	require.Equal(t, "POST", v.Method)
	require.Equal(t, "/tasks/a%2Fb", v.Path, "the path as sent, escapes kept")
	require.Equal(t, "z=1&a=%zz", v.RawQuery)
	require.Equal(t, []string{"k1", "k2"}, v.Header("idempotency-key"))
	require.True(t, v.IsBase64Encoded)
	require.Equal(t, "/wA=", v.Body)
	require.False(t, apigw.FromHTTPRequest(r, []byte(`{"a":1}`)).IsBase64Encoded)
}
