package otelidem_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// request is one protected call's private parts, unique to a test: none
// of them may reach a span or a metric.
type request struct {
	key     string // the idempotency key (an SQS message's id)
	subject string // the caller's subject (a Function's scope)
	path    string
	body    string
	marker  string // in the subject, the path and the body
}

func newRequest() request {
	marker := strings.ReplaceAll(uuid.NewString(), "-", "")
	return request{
		key:     uuid.NewString(),
		subject: "auth0|subject" + marker,
		path:    "/orders/path" + marker,
		body:    `{"item":"body` + marker + `"}`,
		marker:  marker,
	}
}

// secrets are the strings no telemetry may contain: the request's parts
// and the record's ids derived from them.
func (r request) secrets() []string {
	user, key, _ := idempotency.FunctionRecordID("", functionName, r.subject, r.key)
	return []string{r.key, r.marker, idempotency.SubjectUUID(r.subject), user, key}
}

// functionName is the FunctionConfig.Name of the Function and SQS shapes.
const functionName = "charge-order"

// handlerRun is what the protected handler saw of one run.
type handlerRun struct {
	span trace.SpanContext // the span in its context
}

// runs counts a handler's runs and keeps what each saw.
type runs struct {
	mu   sync.Mutex
	seen []handlerRun
	n    atomic.Int32
}

func (r *runs) add(ctx context.Context) {
	r.n.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, handlerRun{span: trace.SpanContextFromContext(ctx)})
}

func (r *runs) first() handlerRun {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[0]
}

// shape is one of the engine's shapes, as the tests drive it.
type shape struct {
	name string
	// spanName is the name of its spans; start their attributes besides
	// ichido.store.name.
	spanName string
	start    map[string]any
	// status is the HTTP status of its answers (0: not HTTP).
	status int
	// server: its calls come inside a server span, their parent.
	server bool
	// open builds a handler on store reporting to tm through a new
	// Observer (a cold start), and returns one call of req on it, which
	// requires the call to succeed with the first run's answer.
	open func(t *testing.T, tm *telemetry, store idemstore.Store, req request, r *runs) func(t *testing.T)
}

func shapes() []shape {
	return []shape{
		{
			name: "Wrap", spanName: "idempotency POST", status: http.StatusCreated,
			start: map[string]any{"ichido.shape": "http", "http.request.method": "POST"},
			open:  openWrap,
		},
		{
			name: "Middleware", spanName: "idempotency POST", status: http.StatusCreated, server: true,
			start: map[string]any{"ichido.shape": "http", "http.request.method": "POST"},
			open:  openMiddleware,
		},
		{
			name: "Function", spanName: "idempotency " + functionName,
			start: map[string]any{"ichido.shape": "function", "ichido.function": functionName},
			open:  openFunction,
		},
		{
			name: "SQSHandler", spanName: "idempotency " + functionName,
			start: map[string]any{
				"ichido.shape": "sqs", "ichido.function": functionName,
				"messaging.system": "aws_sqs", "messaging.operation.type": "process",
			},
			open: openSQS,
		},
	}
}

func openWrap(t *testing.T, tm *telemetry, store idemstore.Store, req request, r *runs) func(t *testing.T) {
	h, err := idempotency.Wrap(func(ctx context.Context, _ events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		r.add(ctx)
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"order":"o-1"}`}, nil
	}, idempotency.Config{Store: store, Settings: quiet(idempotency.Settings{Observer: tm.observer()})})
	require.NoError(t, err)
	ev := events.APIGatewayV2HTTPRequest{RawPath: req.path, Headers: map[string]string{"idempotency-key": req.key, "content-type": "application/json"}, Body: req.body}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.HTTP.Path = req.path
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": req.subject}},
	}
	return func(t *testing.T) {
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, resp.Body)
		require.JSONEq(t, `{"order":"o-1"}`, resp.Body)
	}
}

// userKey is the context key of the user an authentication middleware
// found.
type userKey struct{}

func openMiddleware(t *testing.T, tm *telemetry, store idemstore.Store, req request, r *runs) func(t *testing.T) {
	mw, err := idempotency.Middleware(idempotency.Config{
		Store:    store,
		Subject:  idempotency.ContextSubject(func(ctx context.Context) string { s, _ := ctx.Value(userKey{}).(string); return s }),
		Settings: quiet(idempotency.Settings{Observer: tm.observer()}),
	})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /orders/{id}", func(w http.ResponseWriter, req *http.Request) {
		r.add(req.Context())
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"order":"o-1"}`)
	})
	protected := mw(mux)
	// The framework's server span (otelhttp's) and authentication.
	tracer := tm.tp.Tracer("server")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		ctx, span := tracer.Start(req.Context(), "POST /orders/{id}", trace.WithSpanKind(trace.SpanKindServer))
		defer span.End()
		ctx = context.WithValue(ctx, userKey{}, req.Header.Get("X-User"))
		protected.ServeHTTP(w, req.WithContext(ctx))
	}))
	t.Cleanup(srv.Close)
	return func(t *testing.T) {
		hr, err := http.NewRequest(http.MethodPost, srv.URL+req.path, strings.NewReader(req.body))
		require.NoError(t, err)
		hr.Header.Set("Idempotency-Key", req.key)
		hr.Header.Set("Content-Type", "application/json")
		hr.Header.Set("X-User", req.subject)
		resp, err := srv.Client().Do(hr)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode, string(body))
		require.JSONEq(t, `{"order":"o-1"}`, string(body))
	}
}

// order is the Function shape's input; receipt its result.
type order struct {
	Key     string          `json:"key"`
	Subject string          `json:"subject"`
	Body    json.RawMessage `json:"body"`
}

type receipt struct {
	Order string `json:"order"`
}

func openFunction(t *testing.T, tm *telemetry, store idemstore.Store, req request, r *runs) func(t *testing.T) {
	charge, err := idempotency.Function(func(ctx context.Context, _ order) (receipt, error) {
		r.add(ctx)
		return receipt{Order: "o-1"}, nil
	}, idempotency.FunctionConfig[order]{
		Store:    store,
		Name:     functionName,
		Key:      func(_ context.Context, in order) (string, error) { return in.Key, nil },
		Scope:    func(_ context.Context, in order) (string, error) { return in.Subject, nil },
		Payload:  func(in order) ([]byte, error) { return in.Body, nil },
		Settings: quiet(idempotency.Settings{Observer: tm.observer()}),
	})
	require.NoError(t, err)
	in := order{Key: req.key, Subject: req.subject, Body: json.RawMessage(req.body)}
	return func(t *testing.T) {
		out, err := charge(context.Background(), in)
		require.NoError(t, err)
		require.Equal(t, receipt{Order: "o-1"}, out)
	}
}

func openSQS(t *testing.T, tm *telemetry, store idemstore.Store, req request, r *runs) func(t *testing.T) {
	h, err := idempotency.SQSHandler(func(ctx context.Context, _ events.SQSMessage) error {
		r.add(ctx)
		return nil
	}, idempotency.FunctionConfig[events.SQSMessage]{
		Store: store,
		Name:  functionName,
		Scope: func(_ context.Context, m events.SQSMessage) (string, error) {
			return *m.MessageAttributes["subject"].StringValue, nil
		},
		Payload:  idempotency.SQSBody,
		Settings: quiet(idempotency.Settings{Observer: tm.observer()}),
	})
	require.NoError(t, err)
	ev := events.SQSEvent{Records: []events.SQSMessage{{
		MessageId:         req.key,
		ReceiptHandle:     "handle" + req.marker,
		Body:              req.body,
		EventSourceARN:    "arn:aws:sqs:eu-west-1:123456789012:orders",
		MessageAttributes: map[string]events.SQSMessageAttribute{"subject": {StringValue: &req.subject, DataType: "String"}},
	}}}
	return func(t *testing.T) {
		resp, err := h(context.Background(), ev)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	}
}
