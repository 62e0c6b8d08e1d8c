package idempotency_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
)

const v1Event = `{
  "resource": "/tasks/{id}",
  "path": "/tasks/42",
  "httpMethod": "patch",
  "headers": {"Content-Type": "application/json", "Idempotency-Key": "k2"},
  "multiValueHeaders": {"Content-Type": ["application/json"], "Idempotency-Key": ["k1", "k2"]},
  "queryStringParameters": {"a": "2"},
  "multiValueQueryStringParameters": {"a": ["1", "2"], "b": ["x y"]},
  "requestContext": {"requestId": "r-1", "authorizer": {"principalId": "p", "claims": {"sub": "s-1", "email_verified": true}}},
  "body": "eyJhIjoxfQ==",
  "isBase64Encoded": true
}`

const v2Event = `{
  "version": "2.0",
  "routeKey": "POST /tasks",
  "rawPath": "/tasks",
  "rawQueryString": "b=x%20y&a=1&a=2&flag&bad=%zz",
  "headers": {"content-type": "application/json", "idempotency-key": "k1,k2"},
  "requestContext": {"requestId": "r-2", "http": {"method": "POST", "path": "/tasks"},
    "authorizer": {"jwt": {"claims": {"sub": "s-2"}, "scopes": []}, "lambda": {"userId": "u-2"}}},
  "body": "{\"a\":1}",
  "isBase64Encoded": false
}`

func TestFromRequestV1(t *testing.T) {
	t.Parallel()
	var e events.APIGatewayProxyRequest
	require.NoError(t, json.Unmarshal([]byte(v1Event), &e))
	r := idempotency.RequestFrom(e)
	require.Equal(t, 1, r.Version)
	require.Equal(t, "PATCH", r.Method)
	require.Equal(t, "/tasks/42", r.Path)
	require.Equal(t, url.Values{"a": {"1", "2"}, "b": {"x y"}}, r.Query)
	require.ElementsMatch(t, []string{"k2", "k1", "k2"}, r.Header("IDEMPOTENCY-KEY"))
	require.Equal(t, "eyJhIjoxfQ==", r.Body)
	require.True(t, r.IsBase64Encoded)
	require.Equal(t, "r-1", r.RequestID)
	require.Equal(t, map[string]string{"sub": "s-1", "email_verified": "true"}, r.Claims)
	require.Equal(t, "p", r.AuthorizerContext["principalId"])
}

func TestFromRequestV1SingleValueQuery(t *testing.T) {
	t.Parallel()
	r := idempotency.RequestFrom(events.APIGatewayProxyRequest{HTTPMethod: "POST", QueryStringParameters: map[string]string{"a": "1"}})
	require.Equal(t, url.Values{"a": {"1"}}, r.Query)
	require.Nil(t, r.Claims)
	require.Nil(t, r.AuthorizerContext)
}

func TestFromRequestV2(t *testing.T) {
	t.Parallel()
	var e events.APIGatewayV2HTTPRequest
	require.NoError(t, json.Unmarshal([]byte(v2Event), &e))
	r := idempotency.RequestFrom(e)
	require.Equal(t, 2, r.Version)
	require.Equal(t, "POST", r.Method)
	require.Equal(t, "/tasks", r.Path)
	require.Equal(t, url.Values{"a": {"1", "2"}, "b": {"x y"}, "flag": {""}, "bad": {"%zz"}}, r.Query)
	require.Equal(t, "b=x%20y&a=1&a=2&flag&bad=%zz", r.RawQuery)
	require.Equal(t, []string{"k1,k2"}, r.Header("Idempotency-Key"))
	require.Equal(t, `{"a":1}`, r.Body)
	require.False(t, r.IsBase64Encoded)
	require.Equal(t, "r-2", r.RequestID)
	require.Equal(t, map[string]string{"sub": "s-2"}, r.Claims)
	require.Equal(t, "u-2", r.AuthorizerContext["userId"])
}

func TestFromFunctionURLRequest(t *testing.T) {
	t.Parallel()
	r := events.LambdaFunctionURLRequest{RawPath: "/a%20b", RawQueryString: "x=1&x=2&y=%zz", Headers: map[string]string{"Idempotency-Key": "k"}, Body: "{}"}
	r.RequestContext.HTTP.Method = "post"
	r.RequestContext.RequestID = "req-1"
	r.RequestContext.Authorizer = &events.LambdaFunctionURLRequestContextAuthorizerDescription{
		IAM: &events.LambdaFunctionURLRequestContextAuthorizerIAMDescription{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/u", UserID: "AIDA"},
	}
	v := idempotency.RequestFrom(r)
	require.Equal(t, "POST", v.Method)
	require.Equal(t, "/a%20b", v.Path)
	require.Equal(t, url.Values{"x": {"1", "2"}, "y": {"%zz"}}, v.Query)
	require.Equal(t, "x=1&x=2&y=%zz", v.RawQuery)
	require.Equal(t, []string{"k"}, v.Header("idempotency-key"))
	require.Equal(t, &idempotency.IAMIdentity{AccountID: "123456789012", UserARN: "arn:aws:iam::123456789012:user/u", UserID: "AIDA"}, v.IAM)
	require.Nil(t, v.Claims)
}

func TestFromALBRequestDecodesTheQuery(t *testing.T) {
	t.Parallel()
	r := events.ALBTargetGroupRequest{HTTPMethod: "PATCH", Path: "/tasks/1",
		MultiValueQueryStringParameters: map[string][]string{"b": {"x%20y", "z"}, "a%2B": {"1"}},
		MultiValueHeaders:               map[string][]string{"Idempotency-Key": {"k1", "k2"}}}
	v := idempotency.RequestFrom(r)
	require.Equal(t, url.Values{"a+": {"1"}, "b": {"x y", "z"}}, v.Query)
	require.Equal(t, "a%2B=1&b=x%20y&b=z", v.RawQuery)
	require.Equal(t, []string{"k1", "k2"}, v.Header("Idempotency-Key"))
	single := idempotency.RequestFrom(events.ALBTargetGroupRequest{HTTPMethod: "GET", QueryStringParameters: map[string]string{"q": "a%26b"}})
	require.Equal(t, url.Values{"q": {"a&b"}}, single.Query)
}

func TestFromHTTPRequest(t *testing.T) {
	t.Parallel()
	r := httptest.NewRequest("post", "/tasks/a%2Fb?z=1&a=%zz", nil)
	r.Header.Add("Idempotency-Key", "k1")
	r.Header.Add("Idempotency-Key", "k2")
	v := idempotency.RequestFromHTTP(r, []byte{0xff, 0x00})
	require.Equal(t, "POST", v.Method)
	require.Equal(t, "/tasks/a%2Fb", v.Path, "the path as sent, escapes kept")
	require.Equal(t, "z=1&a=%zz", v.RawQuery)
	require.Equal(t, []string{"k1", "k2"}, v.Header("idempotency-key"))
	require.False(t, v.IsBase64Encoded, "the bytes as they are, never base64")
	require.Equal(t, "\xff\x00", v.Body)
	require.False(t, idempotency.RequestFromHTTP(r, []byte(`{"a":1}`)).IsBase64Encoded)
}

// TestRequestFromHTTPSpellings checks a Header built by hand with one name
// in two spellings: its values are merged under the lower-case name, and
// the other names keep theirs.
func TestRequestFromHTTPSpellings(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/tasks", nil)
	r.Header = http.Header{"X-A": {"1"}, "x-a": {"2", "3"}, "X-B": {"b"}, "Idempotency-Key": {"k"}, "X-Custom-Name": {"c"}}
	v := idempotency.RequestFromHTTP(r, nil)
	require.ElementsMatch(t, []string{"1", "2", "3"}, v.Header("X-A"))
	require.Equal(t, []string{"b"}, v.Header("x-b"))
	require.Equal(t, []string{"k"}, v.Header("IDEMPOTENCY-KEY"))
	require.Equal(t, []string{"c"}, v.Headers["x-custom-name"])
	require.Len(t, v.Headers, 4)
}
