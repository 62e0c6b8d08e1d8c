package apigw_test

import (
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

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
