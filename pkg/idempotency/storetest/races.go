package storetest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// runDecoratorCases runs the cases that go through idempotency.Wrap with the
// store under test: what a client sees when the store races or fails.
func runDecoratorCases(t *testing.T, s suite) {
	cases := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"Decorator/ConcurrentRequestsRunHandlerOnce", s.decoratorConcurrent},
		{"Decorator/ReplayByteForByte", s.decoratorReplay},
		{"Decorator/StoreFailureIs503", s.decoratorStoreFailure},
		{"Decorator/PermanentStoreFailureIs500", s.decoratorPermanent},
		{"Decorator/TooLargeResponseIsNotKept", s.decoratorTooLarge},
		{"Function/TooLargeResultIsNotKept", s.functionTooLarge},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

type v2Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// wrapV2 protects h with st, on the suite's clock, logging and metrics off.
func wrapV2(t *testing.T, st idemstore.Store, h v2Handler) v2Handler {
	t.Helper()
	wrapped, err := idempotency.Wrap(h, idempotency.Config{
		Store: st,
		Settings: idempotency.Settings{
			Clock:   func() time.Time { return base },
			Logger:  slog.New(slog.NewTextHandler(io.Discard, nil)),
			Metrics: io.Discard,
		},
	})
	require.NoError(t, err)
	return wrapped
}

// v2Request is an HTTP API POST by user with an Idempotency-Key.
func v2Request(user, key, body string) events.APIGatewayV2HTTPRequest {
	return events.APIGatewayV2HTTPRequest{
		Version: "2.0",
		RawPath: "/tasks",
		Headers: map[string]string{"content-type": "application/json", "idempotency-key": key},
		Body:    body,
		RequestContext: events.APIGatewayV2HTTPRequestContext{
			HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: http.MethodPost, Path: "/tasks"},
			Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
				JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}},
			},
		},
	}
}

// header returns the value of a response header, in any case.
func header(resp events.APIGatewayV2HTTPResponse, name string) string {
	for k, v := range resp.Headers {
		if http.CanonicalHeaderKey(k) == http.CanonicalHeaderKey(name) {
			return v
		}
	}
	return ""
}

// problemCode returns the code of a problem+json response.
func problemCode(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	require.Equal(t, "application/problem+json", header(resp, "Content-Type"))
	var p struct {
		Code string `json:"code"`
	}
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &p), resp.Body)
	return p.Code
}

func (s suite) decoratorConcurrent(t *testing.T) {
	st := s.newStore(t)
	n := s.opts.Concurrency
	var runs atomic.Int64
	answered := make(chan struct{}, n)
	// The handler holds its claim until half of the other requests have
	// answered (or a generous bound passes), so that the race really
	// overlaps the handler; those answers can only be 409s.
	h := wrapV2(t, st, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		deadline := time.After(20 * time.Second)
		for range n / 2 {
			select {
			case <-answered:
			case <-deadline:
				return events.APIGatewayV2HTTPResponse{StatusCode: 500, Body: "the race never overlapped the handler"}, nil
			}
		}
		return events.APIGatewayV2HTTPResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id": "1", "n": 1}`}, nil
	})

	user, key, body := uuid.NewString(), uuid.NewString(), `{"title":"once"}`
	responses := make([]events.APIGatewayV2HTTPResponse, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			responses[i], errs[i] = h(context.Background(), v2Request(user, key, body))
			if responses[i].StatusCode != 201 || header(responses[i], "Idempotent-Replayed") != "" {
				answered <- struct{}{}
			}
		})
	}
	close(start)
	wg.Wait()

	require.Equal(t, int64(1), runs.Load(), "the handler runs exactly once")
	originals, conflicts, replays := 0, 0, 0
	for i, resp := range responses {
		require.NoError(t, errs[i])
		switch {
		case resp.StatusCode == 201 && header(resp, "Idempotent-Replayed") == "":
			originals++
			require.Equal(t, `{"id": "1", "n": 1}`, resp.Body)
		case resp.StatusCode == 201:
			replays++
			require.Equal(t, "true", header(resp, "Idempotent-Replayed"))
			require.Equal(t, `{"id": "1", "n": 1}`, resp.Body, "a replay is byte for byte")
		case resp.StatusCode == http.StatusConflict:
			conflicts++
			require.Equal(t, "idempotency_key_in_use", problemCode(t, resp))
			require.Equal(t, "1", header(resp, "Retry-After"))
		default:
			t.Fatalf("response %d: unexpected status %d: %s", i, resp.StatusCode, resp.Body)
		}
	}
	require.Equal(t, 1, originals)
	require.GreaterOrEqual(t, conflicts, n/2, "requests racing the running handler get 409")
	require.Equal(t, n-1, conflicts+replays)

	// Once done, the key replays.
	resp, err := h(context.Background(), v2Request(user, key, body))
	require.NoError(t, err)
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, "true", header(resp, "Idempotent-Replayed"))
	require.Equal(t, int64(1), runs.Load())
}

func (s suite) decoratorReplay(t *testing.T) {
	st := s.newStore(t)
	body := "line one\r\n\x00binary\xff tail"
	var runs atomic.Int64
	h := wrapV2(t, st, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/octet-stream"}, Body: body}, nil
	})
	user, key := uuid.NewString(), uuid.NewString()
	first, err := h(context.Background(), v2Request(user, key, `{"a":1}`))
	require.NoError(t, err)
	require.Equal(t, 200, first.StatusCode)

	// The same object re-serialised is the same request.
	again, err := h(context.Background(), v2Request(user, key, "{ \"a\": 1 }"))
	require.NoError(t, err)
	require.Equal(t, int64(1), runs.Load())
	require.Equal(t, 200, again.StatusCode)
	require.Equal(t, []byte(body), []byte(again.Body))
	require.Equal(t, "application/octet-stream", header(again, "Content-Type"))
	require.Equal(t, "true", header(again, "Idempotent-Replayed"))

	// Another body with the same key is refused, and another user's same key
	// is a request of its own.
	other, err := h(context.Background(), v2Request(user, key, `{"a":2}`))
	require.NoError(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, other.StatusCode)
	require.Equal(t, "idempotency_key_reused", problemCode(t, other))
	stranger, err := h(context.Background(), v2Request(uuid.NewString(), key, `{"a":2}`))
	require.NoError(t, err)
	require.Equal(t, 200, stranger.StatusCode)
	require.Empty(t, header(stranger, "Idempotent-Replayed"))
	require.Equal(t, int64(2), runs.Load())
}

func (s suite) decoratorStoreFailure(t *testing.T) {
	if s.opts.NewBrokenStore == nil {
		t.Skip("storetest: Config.NewBrokenStore not given")
	}
	var runs atomic.Int64
	h := wrapV2(t, s.opts.NewBrokenStore(t), func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: 201}, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := h(ctx, v2Request(uuid.NewString(), uuid.NewString(), `{}`))
	require.NoError(t, err)
	require.Zero(t, runs.Load(), "fail closed: the handler does not run")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "idempotency_store_unavailable", problemCode(t, resp))
	require.NotEmpty(t, header(resp, "Retry-After"))
	for _, internal := range []string{"dial", "connect", "127.0.0.1", "StoreError", "idempotency store claim"} {
		require.NotContains(t, resp.Body, internal, "no internal error text reaches the client")
	}
}
