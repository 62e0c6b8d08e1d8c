package idempotency

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/ichido/ichido/pkg/idempotency/internal/apigw"
	"github.com/ichido/ichido/pkg/idempotency/internal/problem"
)

// Middleware returns net/http middleware that gives the handler it wraps Wrap's
// HTTP contract: the same protected methods, key rules, fingerprint,
// problem+json refusals and byte-for-byte replays. It works with any router
// built on http.Handler. Mount it after the authentication middleware.
//
// Config.Subject is required, since a plain server has no API Gateway
// authorizer. It reads the user that authentication put in the context (see
// ContextSubject). The body is read whole, at most Config.MaxBodyBytes, before
// the handler runs. A protected request's response is buffered, flushes
// included, and sent whole when the handler returns. Serve a streamed response
// on a method that is not protected. A handler that panics has its key released
// and the panic goes on. Middleware returns an error, and no middleware, when
// cfg is invalid.
func Middleware(cfg Config) (func(http.Handler) http.Handler, error) {
	if cfg.Subject == nil {
		return nil, errors.New("idempotency: invalid Config: Config.Subject is nil: a net/http server has no API Gateway authorizer; pass a function that reads the user your authentication middleware put into the request's context (see ContextSubject)")
	}
	d, err := newDecorator(cfg)
	if err != nil {
		return nil, err
	}
	d.rawBodies = true
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Methods are compared in upper case, as Wrap compares them: a
			// route without a method pattern hands "post" or "Delete" to
			// the handler, which may well treat it as POST or DELETE.
			if !d.protects(strings.ToUpper(r.Method)) {
				next.ServeHTTP(w, r)
				return
			}
			// One byte past the limit is enough for the decorator to refuse
			// the body with 413, after the user and key checks, as Wrap does.
			// A request built without a body (http.NewRequest with nil, an
			// adapter's) has a nil Body: it is an empty one.
			var body []byte
			if r.Body != nil {
				var err error
				if body, err = io.ReadAll(io.LimitReader(r.Body, int64(d.cfg.MaxBodyBytes)+1)); err != nil {
					writeResponse(w, apigw.Problem(problem.New(http.StatusBadRequest, CodeValidation, "The request body could not be read.")))
					return
				}
			}
			// The buffer is made when the handler runs: a replay needs none.
			var buf *responseBuffer
			answer, own, _ := d.serve(r.Context(), requestFromHTTP(r, unsafeString(body)), len(body), func(ctx context.Context) (apigw.Response, error) {
				buf = &responseBuffer{header: http.Header{}}
				inner := r.WithContext(ctx)
				inner.Body = io.NopCloser(bytes.NewReader(body))
				inner.ContentLength = int64(len(body))
				next.ServeHTTP(buf, inner)
				return buf.response(), nil
			})
			if own { // the handler ran: buf holds its response
				buf.writeTo(w)
				return
			}
			writeResponse(w, answer)
		})
	}, nil
}

// ContextSubject returns a Config.Subject for Middleware that reads the user
// from the request's context through user. user is typically the authentication
// middleware's accessor, returning "" when there is none.
func ContextSubject(user func(ctx context.Context) string) SubjectFunc {
	return func(ctx context.Context, _ Request) (string, error) {
		return user(ctx), nil
	}
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

// response is the buffered response as the decorator stores it: a body
// that is not UTF-8 as base64.
func (w *responseBuffer) response() apigw.Response {
	status := w.status
	if !w.wroteHeader {
		status = http.StatusOK
	}
	// The body's bytes as they are: every store keeps any bytes, so a plain
	// server's response is never encoded to be stored or decoded to be
	// replayed.
	return apigw.Response{StatusCode: status, Headers: w.header.Clone(), Body: w.body.String()}
}

// writeTo sends the buffered response, every header the handler set
// included, to w.
func (w *responseBuffer) writeTo(out http.ResponseWriter) {
	h := out.Header()
	for name, values := range w.header {
		h[name] = values
	}
	status := w.status
	if !w.wroteHeader {
		status = http.StatusOK
	}
	out.WriteHeader(status)
	_, _ = out.Write(w.body.Bytes()) // the client went away; nothing to be done
}

// writeResponse writes a decorator's answer to w.
func writeResponse(w http.ResponseWriter, resp apigw.Response) {
	h := w.Header()
	if s := resp.Stored; s != nil {
		replayHeaders(h, *s)
		resp.StatusCode, resp.Body, resp.IsBase64Encoded = s.StatusCode, s.Body, s.IsBase64Encoded
	}
	for name, values := range resp.Headers {
		h[name] = values
	}
	w.WriteHeader(resp.StatusCode)
	// A body kept base64 (a Lambda handler's, under the same keys) is
	// decoded; any other is written as it is, without a copy.
	if resp.IsBase64Encoded {
		if decoded, err := base64.StdEncoding.DecodeString(resp.Body); err == nil {
			_, _ = w.Write(decoded)
			return
		}
	}
	_, _ = io.WriteString(w, resp.Body) // the client went away; nothing to be done
}
