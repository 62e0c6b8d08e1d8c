package apigw_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// A v1 event as a REST API sends it, with a Cognito authorizer.
// A v2 event as an HTTP API sends it, with a JWT authorizer.
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
	r := apigw.Problem(problem.New(http.StatusConflict, "idempotency_key_in_use", "a request with this key is in progress"))
	require.Equal(t, http.StatusConflict, r.StatusCode)
	require.Equal(t, problem.ContentType, r.Headers.Get("Content-Type"))
	var d problem.Details
	require.NoError(t, json.Unmarshal([]byte(r.Body), &d))
	require.Equal(t, "idempotency_key_in_use", d.Code)
	require.Equal(t, "Request with this Idempotency-Key in progress", d.Title)
}
