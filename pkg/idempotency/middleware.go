package idempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"

	"github.com/ichido/ichido/pkg/apigw"
	"github.com/ichido/ichido/pkg/problem"
)

// DefaultMaxRequestBytes bounds the body of a request that Middleware
// protects: Lambda's own limit on a synchronous request payload.
const DefaultMaxRequestBytes = 6 << 20

// Middleware returns net/http middleware that gives the handler it wraps
// exactly the HTTP contract of Wrap (see the package documentation): the
// same protected methods, the same Idempotency-Key rules, the same
// fingerprint (over the method, the escaped path, the query and the body),
// the same problem+json refusals and codes, and a byte-for-byte replay of
// the stored status, body and content headers marked Idempotent-Replayed:
// true. It works with any router built on http.Handler (the standard
// library's ServeMux, chi, gorilla/mux); mount it after the authentication
// middleware.
//
// cfg is Wrap's Config, with two differences:
//
//   - Config.UserID is required: a plain HTTP server has no API Gateway
//     authorizer, so the function must read the user that the
//     authentication middleware put into the request's context (ctx is
//     r.Context(); the apigw.Request it gets has no Claims). ContextUserID
//     adapts a plain context reader.
//   - The request body is read whole before the handler runs, at most
//     DefaultMaxRequestBytes; a larger one is refused with 413
//     payload_too_large before the store is consulted.
//
// Responses of protected requests are buffered: the handler's writes,
// flushes included (http.Flusher is a no-op here, and the writer does not
// unwrap to the connection's), reach the client when the handler returns,
// whole, and are what is stored. A streamed response (server-sent events,
// a long download) therefore arrives at once at the end; serve such
// endpoints on a method that is not protected, where the middleware passes
// the request through untouched and nothing is buffered. Hijacking a
// protected request's connection is not supported.
//
// A handler that panics has its key released and the panic goes on (the
// server aborts the response). Middleware returns an error, and no
// middleware, when cfg is invalid.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	if cfg.UserID == nil {
		return nil, errors.New("idempotency: invalid Config: Config.UserID is nil: a net/http server has no API Gateway authorizer; pass a function that reads the user your authentication middleware put into the request's context (see ContextUserID)")
	}
	if err := cfg.withDefaults().validate(); err != nil {
		return nil, err
	}
	methods := cfg.withDefaults().Methods
	return func(next http.Handler) http.Handler {
		h, err := Wrap(func(ctx context.Context, ev eventV2) (responseV2, error) {
			r := ctx.Value(httpRequestKey{}).(*http.Request)
			body := ctx.Value(httpBodyKey{}).([]byte)
			rec := &responseBuffer{header: http.Header{}}
			r = r.WithContext(ctx)
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			next.ServeHTTP(rec, r)
			return rec.response(), nil
		}, cfg)
		if err != nil {
			// Middleware checked the Config before returning this function.
			panic(err)
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !slices.Contains(methods, r.Method) {
				next.ServeHTTP(w, r)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, DefaultMaxRequestBytes))
			if err != nil {
				writeProblem(w, tooLargeOrUnreadable(err))
				return
			}
			ctx := context.WithValue(r.Context(), httpRequestKey{}, r)
			ctx = context.WithValue(ctx, httpBodyKey{}, body)
			resp, _ := h(ctx, httpEventOf(r, body)) // the inner handler never fails
			writeResponse(w, apigw.FromResponse(resp))
		})
	}, nil
}

// ContextUserID returns a Config.UserID for Middleware that reads the user
// from the request's context through user, typically the accessor of the
// authentication middleware ("" when there is none).
func ContextUserID(user func(ctx context.Context) string) UserIDFunc {
	return func(ctx context.Context, _ apigw.Request) (string, error) {
		return user(ctx), nil
	}
}

// The HTTP API payload that Middleware describes a request as.
type (
	eventV2    = events.APIGatewayV2HTTPRequest
	responseV2 = events.APIGatewayV2HTTPResponse
)

type httpRequestKey struct{}

type httpBodyKey struct{}

// httpEventOf describes r as an HTTP API request, so that the fingerprint
// and the key rules are those of a Lambda behind API Gateway: the escaped
// path, the raw query, headers joined with "," as API Gateway joins a
// repeated header, and a body that is not UTF-8 as base64.
func httpEventOf(r *http.Request, body []byte) eventV2 {
	ev := eventV2{
		RawPath:        r.URL.EscapedPath(),
		RawQueryString: r.URL.RawQuery,
		Headers:        make(map[string]string, len(r.Header)),
	}
	ev.RequestContext.HTTP.Method = r.Method
	ev.RequestContext.HTTP.Path = r.URL.Path
	for name, values := range r.Header {
		ev.Headers[strings.ToLower(name)] = strings.Join(values, ",")
	}
	if utf8.Valid(body) {
		ev.Body = string(body)
	} else {
		ev.Body = base64.StdEncoding.EncodeToString(body)
		ev.IsBase64Encoded = true
	}
	return ev
}

// responseBuffer buffers a protected request's response.
type responseBuffer struct {
	header      http.Header
	status      int
	body        bytes.Buffer
	wroteHeader bool
}

func (w *responseBuffer) Header() http.Header { return w.header }

func (w *responseBuffer) WriteHeader(status int) {
	if w.wroteHeader || status < 200 && status >= 100 {
		return // informational answers (103 Early Hints) are not kept
	}
	w.status, w.wroteHeader = status, true
}

func (w *responseBuffer) Write(p []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.body.Write(p)
}

// Flush is a no-op: the response is sent whole when the handler returns.
func (w *responseBuffer) Flush() {}

func (w *responseBuffer) response() responseV2 {
	status := w.status
	if !w.wroteHeader {
		status = http.StatusOK
	}
	resp := responseV2{StatusCode: status, MultiValueHeaders: map[string][]string{}}
	for name, values := range w.header {
		resp.MultiValueHeaders[name] = append([]string(nil), values...)
	}
	if b := w.body.Bytes(); utf8.Valid(b) {
		resp.Body = string(b)
	} else {
		resp.Body = base64.StdEncoding.EncodeToString(b)
		resp.IsBase64Encoded = true
	}
	return resp
}

// writeResponse writes a decorator's answer to w.
func writeResponse(w http.ResponseWriter, resp apigw.Response) {
	body := []byte(resp.Body)
	if resp.IsBase64Encoded {
		if decoded, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			body = decoded
		}
	}
	h := w.Header()
	for name, values := range resp.Headers {
		h[name] = values
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body) // the client went away; nothing to be done
}

func writeProblem(w http.ResponseWriter, d problem.Details) {
	writeResponse(w, apigw.Problem(d))
}

// tooLargeOrUnreadable is the refusal of a body that could not be read.
func tooLargeOrUnreadable(err error) problem.Details {
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodePayloadTooLarge,
			"The request body is larger than this endpoint accepts.")
	}
	return problem.New(http.StatusBadRequest, problem.CodeValidation, "The request body could not be read.")
}
