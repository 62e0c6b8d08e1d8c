package localapi_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/internal/localapi"
)

// A gateway in front of one function, as `make run` puts one in front of
// each function of template.yaml.
func ExampleNew() {
	hello := func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		sub := ev.RequestContext.Authorizer.JWT.Claims["sub"]
		return events.APIGatewayV2HTTPResponse{
			StatusCode: 200,
			Headers:    map[string]string{"Content-Type": "text/plain"},
			Body:       fmt.Sprintf("%s %s as %s", ev.RouteKey, ev.PathParameters["id"], sub),
		}, nil
	}
	gw, err := localapi.New(localapi.Config{
		Routes:   []localapi.Route{{Method: "GET", Path: "/tasks/{id}", Function: "GetTaskFunction"}},
		Handlers: map[string]localapi.Handler{"GetTaskFunction": hello},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(gw)
	defer srv.Close()

	token, _ := localapi.NewToken(localapi.TokenOptions{Subject: "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"})
	for _, auth := range []string{"Bearer " + token, ""} {
		req, _ := http.NewRequest("GET", srv.URL+"/tasks/42", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			panic(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		fmt.Println(resp.StatusCode, string(body))
	}
	// Output:
	// 200 GET /tasks/{id} 42 as 7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f
	// 401 {"message":"Unauthorized"}
}
