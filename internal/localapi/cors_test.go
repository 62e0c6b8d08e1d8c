package localapi_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/localapi"
)

func TestCORS(t *testing.T) {
	t.Parallel()
	f := &fake{resp: events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{
		"Location": "/tasks/1", "Access-Control-Allow-Origin": "https://evil.example",
	}}}
	handlers := map[string]localapi.Handler{}
	for _, r := range taskRoutes {
		handlers[r.Function] = f.handle
	}
	gw, err := localapi.New(localapi.Config{Routes: taskRoutes, Handlers: handlers, CORS: &localapi.CORS{
		AllowOrigins:  []string{"https://app.example"},
		AllowMethods:  []string{"GET", "POST"},
		AllowHeaders:  []string{"authorization", "content-type", "idempotency-key"},
		ExposeHeaders: []string{"location", "idempotent-replayed"},
		MaxAge:        600,
	}})
	require.NoError(t, err)
	srv := httptest.NewServer(gw)
	t.Cleanup(srv.Close)

	// A preflight is answered by the gateway, without a token and
	// without running a function.
	req, _ := http.NewRequest("OPTIONS", srv.URL+"/tasks", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	req.Header.Set("Access-Control-Request-Headers", "authorization,idempotency-key")
	resp, body := do(t, req)
	require.Equal(t, 204, resp.StatusCode)
	require.Empty(t, body)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "GET,POST", resp.Header.Get("Access-Control-Allow-Methods"))
	require.Equal(t, "authorization,content-type,idempotency-key", resp.Header.Get("Access-Control-Allow-Headers"))
	require.Equal(t, "600", resp.Header.Get("Access-Control-Max-Age"))

	// Another origin gets no CORS headers.
	req.Header.Set("Origin", "https://other.example")
	resp, _ = do(t, req)
	require.Equal(t, 204, resp.StatusCode)
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	require.Zero(t, f.calls())

	// An actual request gets the configured headers, not the function's.
	req, _ = http.NewRequest("POST", srv.URL+"/tasks", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Authorization", "Bearer "+token(t, userID))
	resp, _ = do(t, req)
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))
	require.Equal(t, "location,idempotent-replayed", resp.Header.Get("Access-Control-Expose-Headers"))
	require.Equal(t, "/tasks/1", resp.Header.Get("Location"))

	// The gateway's own 401 carries them too, so that a page can read it.
	req, _ = http.NewRequest("GET", srv.URL+"/tasks", nil)
	req.Header.Set("Origin", "https://app.example")
	resp, body = do(t, req)
	require.Equal(t, 401, resp.StatusCode)
	require.Equal(t, `{"message":"Unauthorized"}`, body)
	require.Equal(t, "https://app.example", resp.Header.Get("Access-Control-Allow-Origin"))

	// Without a CORS configuration an OPTIONS request is routed: no route.
	plain := serve(t, taskRoutes, &fake{}, nil)
	req, _ = http.NewRequest("OPTIONS", plain.URL+"/tasks", nil)
	req.Header.Set("Origin", "https://app.example")
	req.Header.Set("Access-Control-Request-Method", "POST")
	resp, body = do(t, req)
	require.Equal(t, 404, resp.StatusCode)
	require.Equal(t, `{"message":"Not Found"}`, body)
}
