package taskfn

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"strings"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/pkg/idempotency"
)

// Authenticator returns the authenticated user (the token's sub, a UUID) of
// a request, or an error when it has none. A deployment verifies a real
// token here (an OIDC or Cognito JWT, an ALB's x-amzn-oidc-data).
type Authenticator func(r *http.Request) (sub string, err error)

// HTTPHandler returns the task API as a plain net/http handler, the shape
// of a service on ECS Fargate (or of a router inside one Lambda behind the
// Lambda Web Adapter): authenticate authenticates every request (a request
// it refuses gets 401 unauthenticated), and the mutating routes (POST
// /tasks, PATCH and DELETE /tasks/{id}) are protected by
// idempotency.Middleware with the same store and TTL as the Lambda
// functions, so that both shapes answer alike. The task handlers are the
// Lambda functions' own; each request reaches them as an HTTP API event.
func (f *Functions) HTTPHandler(authenticate Authenticator) (http.Handler, error) {
	protect, err := idempotency.Middleware(idempotency.Config{
		Store:   f.store,
		Subject: idempotency.ContextSubject(subject),
		Settings: idempotency.Settings{
			TTL:      f.ttl,
			Logger:   f.logger,
			Metrics:  f.metrics,
			Observer: f.observer,
		},
	})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("POST /tasks", protect(lambdaRoute("POST /tasks", f.api.Create)))
	mux.Handle("GET /tasks", lambdaRoute("GET /tasks", f.api.List))
	mux.Handle("GET /tasks/{id}", lambdaRoute("GET /tasks/{id}", f.api.Get))
	mux.Handle("PATCH /tasks/{id}", protect(lambdaRoute("PATCH /tasks/{id}", f.api.Update)))
	mux.Handle("DELETE /tasks/{id}", protect(lambdaRoute("DELETE /tasks/{id}", f.api.Delete)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, problem.New(http.StatusNotFound, problem.CodeNotFound, "No route matches "+r.Method+" "+r.URL.Path+"."))
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub, err := authenticate(r)
		if err != nil || sub == "" {
			writeProblem(w, problem.New(http.StatusUnauthorized, idempotency.CodeUnauthenticated, "Send a valid bearer token in the Authorization header."))
			return
		}
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, sub)))
	}), nil
}

type subjectKey struct{}

// subject is the authenticated user that HTTPHandler put in ctx.
func subject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// lambdaRoute serves one route with a task handler, handing it the request
// as an HTTP API (payload 2.0) event with the route's path parameters and
// the user as a JWT authorizer's claims.
func lambdaRoute(routeKey string, h Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeProblem(w, problem.New(http.StatusBadRequest, problem.CodeValidation, "The request body could not be read."))
			return
		}
		view := idempotency.RequestFromHTTP(r, body)
		ev := events.APIGatewayV2HTTPRequest{
			Version:         "2.0",
			RouteKey:        routeKey,
			RawPath:         view.Path,
			RawQueryString:  r.URL.RawQuery,
			Headers:         map[string]string{},
			Body:            view.Body,
			IsBase64Encoded: view.IsBase64Encoded,
		}
		for name, values := range view.Headers {
			ev.Headers[name] = strings.Join(values, ",")
		}
		if len(view.Query) > 0 {
			ev.QueryStringParameters = map[string]string{}
			for name, values := range view.Query {
				ev.QueryStringParameters[name] = strings.Join(values, ",")
			}
		}
		if id := r.PathValue("id"); id != "" {
			ev.PathParameters = map[string]string{"id": id}
		}
		ev.RequestContext.RouteKey = routeKey
		ev.RequestContext.HTTP.Method = r.Method
		ev.RequestContext.HTTP.Path = view.Path
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": subject(r.Context())}},
		}
		resp, err := h(r.Context(), ev)
		if err != nil {
			// The task handlers answer every failure; an error here is a bug.
			writeProblem(w, problem.New(http.StatusInternalServerError, problem.CodeInternal, "The request failed."))
			return
		}
		writeLambdaResponse(w, resp)
	})
}

func writeLambdaResponse(w http.ResponseWriter, resp events.APIGatewayV2HTTPResponse) {
	h := w.Header()
	for name, values := range resp.MultiValueHeaders {
		for _, v := range values {
			h.Add(name, v)
		}
	}
	for name, value := range resp.Headers {
		if _, ok := h[http.CanonicalHeaderKey(name)]; !ok {
			h.Set(name, value)
		}
	}
	for _, c := range resp.Cookies {
		h.Add("Set-Cookie", c)
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if decoded, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = decoded
		}
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

func writeProblem(w http.ResponseWriter, d problem.Details) {
	w.Header().Set("Content-Type", problem.ContentType)
	w.WriteHeader(d.Status)
	_, _ = w.Write(d.JSON())
}
