package storetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
)

// Mount puts the idempotency middleware mw in front of h in a router and
// returns the router, as an application would mount it.
type Mount func(mw func(http.Handler) http.Handler, h http.Handler) http.Handler

// ServeMux mounts the middleware with the standard library's ServeMux.
func ServeMux(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", mw(h))
	return mux
}

// runMiddleware runs the HTTP behaviour table of runHTTP
// against idempotency.Middleware, over real HTTP (an httptest.Server),
// mounted in a router by mount (ServeMux, or a chi router in a test of its
// own), with the Store that newStore returns.
//
// The table's handlers become http.Handlers: a handler's error, which
// net/http has no way to return, aborts the response (the middleware sees
// a panic and releases the key), and the case sees the error again; a
// panic goes on to the case the same way. The one case that has no HTTP
// form, a body flagged base64 that is not base64, is left out.
func runMiddleware(t *testing.T, newStore func(t *testing.T) idemstore.Store, mount Mount) {
	t.Helper()
	runPayload(t, middlewarePayload("net/http", mount), newStore)
}

// The test server's stand-in for an authentication middleware: it takes
// the user (and a Lambda authorizer's context) from these headers into the
// request's context, where Config.Subject finds them.
const (
	headerTestSub        = "X-Test-Sub"
	headerTestAuthorizer = "X-Test-Authorizer"
	headerTestDeadline   = "X-Test-Deadline"
	headerTestCall       = "X-Test-Call"
)

type authKey struct{}

type auth struct {
	claims map[string]string
	lambda map[string]any
}

// handlerFailure carries a table handler's error through the middleware as
// a panic, since an http.Handler cannot return one.
type handlerFailure struct{ err error }

// outcomes remembers, per call, the error or panic a handler ended with.
type outcomes struct {
	mu    sync.Mutex
	calls map[string]any
}

func (o *outcomes) put(call string, v any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.calls[call] = v
}

func (o *outcomes) take(call string) (any, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	v, ok := o.calls[call]
	delete(o.calls, call)
	return v, ok
}

func middlewarePayload(name string, mount Mount) payload {
	return payload{
		name: name,
		skip: map[string]bool{"a body marked base64 that is not base64 is refused": true},
		wrap: func(t *testing.T, h handler, cfg idempotency.Config) invoker {
			userID := cfg.Subject
			if userID == nil {
				userID = idempotency.ClaimsSubject
			}
			cfg.Subject = func(ctx context.Context, req idempotency.Request) (string, error) {
				a, _ := ctx.Value(authKey{}).(auth)
				req.Claims, req.AuthorizerContext = a.claims, a.lambda
				return userID(ctx, req)
			}
			mw, err := idempotency.Middleware(cfg)
			require.NoError(t, err)

			ends := &outcomes{calls: map[string]any{}}
			inner := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, err := io.ReadAll(r.Body)
				require.NoError(t, err)
				resp, err := h(r.Context(), idempotency.RequestFromHTTP(r, body))
				if err != nil {
					panic(handlerFailure{err})
				}
				writeTableResponse(w, resp)
			})
			server := httptest.NewServer(withTestAuth(ends, mount(mw, inner)))
			// A fresh connection per request: Go's Transport resends a request
			// that carries an Idempotency-Key when a reused connection fails
			// before the answer, which would hide an aborted response.
			client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
			t.Cleanup(server.Close)
			return func(ctx context.Context, r request) (apigw.Response, error) {
				return callServer(ctx, server.URL, client, ends, r)
			}
		},
	}
}

// withTestAuth is the test server's outermost layer: the stand-in
// authentication, the deadline of the case's context, and the record of a
// handler's error or panic.
func withTestAuth(ends *outcomes, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := r.Header.Get(headerTestCall)
		defer func() {
			if v := recover(); v != nil {
				ends.put(call, v)
				panic(http.ErrAbortHandler)
			}
		}()
		ctx := r.Context()
		var a auth
		if sub := r.Header.Get(headerTestSub); sub != "" {
			a.claims = map[string]string{"sub": sub}
		}
		if raw := r.Header.Get(headerTestAuthorizer); raw != "" {
			if err := json.Unmarshal([]byte(raw), &a.lambda); err != nil {
				panic(err)
			}
		}
		ctx = context.WithValue(ctx, authKey{}, a)
		if raw := r.Header.Get(headerTestDeadline); raw != "" {
			deadline, err := time.Parse(time.RFC3339Nano, raw)
			if err != nil {
				panic(err)
			}
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
		for _, name := range []string{headerTestSub, headerTestAuthorizer, headerTestDeadline, headerTestCall} {
			r.Header.Del(name)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// writeTableResponse writes a table handler's answer.
func writeTableResponse(w http.ResponseWriter, resp apigw.Response) {
	for name, values := range resp.Headers {
		w.Header()[name] = values
	}
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		decoded, err := base64.StdEncoding.DecodeString(resp.Body)
		if err != nil {
			panic(err)
		}
		body = decoded
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// callServer sends r to the server and reads the answer back into the
// table's shape: a body that is not UTF-8 as base64.
func callServer(ctx context.Context, base string, client *http.Client, ends *outcomes, r request) (apigw.Response, error) {
	body := []byte(r.body)
	if r.b64 {
		decoded, err := base64.StdEncoding.DecodeString(r.body)
		if err != nil {
			return apigw.Response{}, fmt.Errorf("the case's body is not base64: %w", err)
		}
		body = decoded
	}
	target := base + r.path
	if r.query != "" {
		target += "?" + r.query
	}
	req, err := http.NewRequestWithContext(context.WithoutCancel(ctx), r.method, target, bytes.NewReader(body))
	if err != nil {
		return apigw.Response{}, err
	}
	for name, value := range r.headers {
		req.Header[name] = append(req.Header[name], value)
	}
	for name, values := range r.multi {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	call := uuid.NewString()
	req.Header.Set(headerTestCall, call)
	if r.sub != "" {
		req.Header.Set(headerTestSub, r.sub)
	}
	if r.lambda != nil {
		raw, err := json.Marshal(r.lambda)
		if err != nil {
			return apigw.Response{}, err
		}
		req.Header.Set(headerTestAuthorizer, string(raw))
	}
	if deadline, ok := ctx.Deadline(); ok {
		req.Header.Set(headerTestDeadline, deadline.Format(time.RFC3339Nano))
	}
	resp, err := client.Do(req)
	if err == nil {
		defer resp.Body.Close()
		var b []byte
		if b, err = io.ReadAll(resp.Body); err == nil {
			out := apigw.Response{StatusCode: resp.StatusCode, Headers: resp.Header, Body: string(b)}
			if !utf8.Valid(b) {
				out.Body, out.IsBase64Encoded = base64.StdEncoding.EncodeToString(b), true
			}
			return out, nil
		}
	}
	// The server aborted the response: the handler failed or panicked.
	switch v, _ := ends.take(call); v := v.(type) {
	case handlerFailure:
		return apigw.Response{}, v.err
	case nil:
		return apigw.Response{}, err
	default:
		panic(v)
	}
}
