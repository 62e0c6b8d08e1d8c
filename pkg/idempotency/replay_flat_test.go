package idempotency

import (
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// storedReplays are stored responses whose replays the tests below build
// each way: no headers, names in any case, cookies, a handler's own
// Idempotent-Replayed and a base64 body.
func storedReplays() []idemstore.Response {
	return []idemstore.Response{
		{StatusCode: 201, Body: `{"id":"1"}`},
		{StatusCode: 200, Headers: map[string]string{"content-type": "application/json", "Location": "/tasks/1"}, Body: "x"},
		{StatusCode: 302, Headers: map[string]string{"Set-Cookie": encodeCookies([]string{"a=1; Expires=Wed, 21 Oct 2026 07:28:00 GMT", "b=2"}), "Location": "/"}},
		{StatusCode: 200, Headers: map[string]string{"set-cookie": "plain=1", ReplayedHeader: "false"}, Body: "AAAA", IsBase64Encoded: true},
	}
}

// TestFlatReplay checks that a replay built straight into an events
// payload is the one replay and ToResponse make, for every payload.
func TestFlatReplay(t *testing.T) {
	d := &decorator{}
	for _, s := range storedReplays() {
		flat, full := d.flatReplay(s), d.replay(s)
		require.Equal(t, apigw.ToResponse[events.APIGatewayV2HTTPResponse](full), apigw.ToResponse[events.APIGatewayV2HTTPResponse](flat))
		require.Equal(t, apigw.ToResponse[events.APIGatewayProxyResponse](full), apigw.ToResponse[events.APIGatewayProxyResponse](flat))
		require.Equal(t, apigw.ToResponse[events.LambdaFunctionURLResponse](full), apigw.ToResponse[events.LambdaFunctionURLResponse](flat))
		require.Equal(t, apigw.ToResponse[events.ALBTargetGroupResponse](full), apigw.ToResponse[events.ALBTargetGroupResponse](flat))
	}
}

// TestMiddlewareReplayStored checks that Middleware's replay, written
// straight from the stored response into its writer's headers, is the one
// the built replay writes, over headers an outer middleware set before.
func TestMiddlewareReplayStored(t *testing.T) {
	d := &decorator{}
	for _, s := range storedReplays() {
		outer := func() *httptest.ResponseRecorder {
			w := httptest.NewRecorder()
			w.Header().Set("Set-Cookie", "outer=1")
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("X-Outer", "kept")
			return w
		}
		built, stored := outer(), outer()
		writeResponse(built, d.replay(s))
		writeResponse(stored, apigw.Response{Stored: &s})
		require.Equal(t, built.Code, stored.Code)
		require.Equal(t, built.Header(), stored.Header())
		require.Equal(t, built.Body.String(), stored.Body.String())
		require.Equal(t, "kept", stored.Header().Get("X-Outer"))
		require.Equal(t, []string{"true"}, stored.Header()[ReplayedHeader])
	}
}
