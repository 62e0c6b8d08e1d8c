package apigw_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/apigw"
	"github.com/ichido/ichido/pkg/problem"
)

// A v1 event as a REST API sends it, with a Cognito authorizer.
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

// A v2 event as an HTTP API sends it, with a JWT authorizer.
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
	r := apigw.FromRequest(e)
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
	r := apigw.FromRequest(events.APIGatewayProxyRequest{HTTPMethod: "POST", QueryStringParameters: map[string]string{"a": "1"}})
	require.Equal(t, url.Values{"a": {"1"}}, r.Query)
	require.Nil(t, r.Claims)
	require.Nil(t, r.AuthorizerContext)
}

func TestFromRequestV2(t *testing.T) {
	t.Parallel()
	var e events.APIGatewayV2HTTPRequest
	require.NoError(t, json.Unmarshal([]byte(v2Event), &e))
	r := apigw.FromRequest(e)
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

func TestResponsesRoundTrip(t *testing.T) {
	t.Parallel()
	resp := apigw.Response{
		StatusCode:      201,
		Headers:         http.Header{"Content-Type": {"image/png"}, "Vary": {"a", "b"}},
		Body:            "iVBORw0KGgo=",
		IsBase64Encoded: true,
	}
	v1 := apigw.ToResponse[events.APIGatewayProxyResponse](resp)
	require.Equal(t, events.APIGatewayProxyResponse{
		StatusCode:      201,
		Headers:         map[string]string{"Content-Type": "image/png", "Vary": "a, b"},
		Body:            "iVBORw0KGgo=",
		IsBase64Encoded: true,
	}, v1)
	v2 := apigw.ToResponse[events.APIGatewayV2HTTPResponse](resp)
	require.Equal(t, 201, v2.StatusCode)
	require.True(t, v2.IsBase64Encoded)
	require.Equal(t, "a, b", v2.Headers["Vary"])

	back := apigw.FromResponse(events.APIGatewayV2HTTPResponse{
		StatusCode:        200,
		Headers:           map[string]string{"content-type": "text/plain", "x-one": "single"},
		MultiValueHeaders: map[string][]string{"X-One": {"m1", "m2"}},
	})
	require.Equal(t, "text/plain", back.Headers.Get("Content-Type"))
	require.Equal(t, []string{"m1", "m2"}, back.Headers.Values("X-One"), "multiValueHeaders wins over headers")
}

func TestQueryPartsMarkWhatCannotBeDecoded(t *testing.T) {
	t.Parallel()
	var got []apigw.QueryPart
	for p := range apigw.QueryParts("a=%zz&a=%25zz&%zz=1&&b&c=x+y%41") {
		got = append(got, p)
	}
	require.Equal(t, []apigw.QueryPart{
		{Name: "a", Value: "%zz", ValueRaw: true},
		{Name: "a", Value: "%zz"},
		{Name: "%zz", Value: "1", NameRaw: true},
		{Name: "b"},
		{Name: "c", Value: "x yA"},
	}, got)
}

func TestCookiesRoundTrip(t *testing.T) {
	t.Parallel()
	cookies := []string{"a=1; Path=/; HttpOnly", "b=2; Expires=Wed, 21 Oct 2026 07:28:00 GMT"}
	v2 := apigw.FromResponse(events.APIGatewayV2HTTPResponse{
		StatusCode: 200,
		Headers:    map[string]string{"Content-Type": "text/plain"},
		Cookies:    cookies,
	})
	require.Equal(t, cookies, v2.Headers.Values("Set-Cookie"), "v2 cookies are Set-Cookie values")

	out2 := apigw.ToResponse[events.APIGatewayV2HTTPResponse](v2)
	require.Equal(t, cookies, out2.Cookies)
	require.NotContains(t, out2.Headers, "Set-Cookie", "no joined Set-Cookie line")
	require.Equal(t, "text/plain", out2.Headers["Content-Type"])

	out1 := apigw.ToResponse[events.APIGatewayProxyResponse](v2)
	require.Equal(t, map[string][]string{"Set-Cookie": cookies}, out1.MultiValueHeaders, "one header line per cookie")
	require.NotContains(t, out1.Headers, "Set-Cookie")

	back := apigw.FromResponse(out1)
	require.Equal(t, cookies, back.Headers.Values("Set-Cookie"))
}

func TestProblem(t *testing.T) {
	t.Parallel()
	r := apigw.Problem(problem.New(http.StatusConflict, problem.CodeKeyInUse, "busy"))
	require.Equal(t, http.StatusConflict, r.StatusCode)
	require.Equal(t, problem.ContentType, r.Headers.Get("Content-Type"))
	var d problem.Details
	require.NoError(t, json.Unmarshal([]byte(r.Body), &d))
	require.Equal(t, problem.CodeKeyInUse, d.Code)
}
