// Package logdigest_test drives every shape of the library through every
// outcome with Settings.LogDigestSecret set, and scans each log line for a
// raw key, subject or path.
package logdigest_test

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/aws/aws-lambda-go/events"
	"github.com/gin-gonic/gin"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/echoidem"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/webhook"
)

// The identifiers no line may show, and the path the HTTP shapes serve.
const (
	subject    = "auth0|private-person-77"
	keyPrefix  = "alice@example.com/order-77-"
	secretPath = "/private-path-77/orders"
	hookSecret = "the webhook's secret, 77"
)

// faultyStore is a memstore whose claims fail, or find the record in
// progress, on demand. Its failure quotes the record's ids, as a real
// store's error may.
type faultyStore struct {
	*memstore.Store
	down, busy atomic.Bool
}

func (s *faultyStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	switch {
	case s.down.Load():
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: fmt.Errorf("the value at {%s:%s} could not be read", c.UserID, c.Key)}
	case s.busy.Load():
		return idemstore.ClaimResult{Record: idemstore.Record{UserID: c.UserID, Key: c.Key, Owner: "another", Fingerprint: c.Fingerprint,
			Status: idemstore.StatusInProgress, CreatedAt: c.Now, LeaseUntil: c.LeaseUntil, ExpiresAt: c.ExpiresAt}}, nil
	}
	return s.Store.Claim(ctx, c)
}

// call sends one request of a shape with key and body; a body of "fail"
// makes the handler fail with an error that quotes the key.
type call func(t *testing.T, key, body string)

// handlerFailure is the handler's failure, which quotes the key.
func handlerFailure(key string) error {
	return fmt.Errorf("charging %s failed", key)
}

// TestNoRawIdentifierInAnyLine runs each shape through each outcome and
// scans every line the library wrote.
func TestNoRawIdentifierInAnyLine(t *testing.T) {
	secret := bytes.Repeat([]byte{9}, 32)
	var mu sync.Mutex
	var logs bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&lockedWriter{mu: &mu, w: &logs}, nil))
	settings := idempotency.Settings{LogDigestSecret: secret, Logger: logger, Metrics: io.Discard}

	shapes := map[string]func(t *testing.T, st idemstore.Store) call{
		"Wrap":       wrapShape(settings),
		"Middleware": httpShape(settings, "middleware"),
		"Gin":        httpShape(settings, "gin"),
		"Echo":       httpShape(settings, "echo"),
		"Function":   functionShape(settings),
		"SQSHandler": sqsShape(settings),
		"gRPC":       grpcShape(settings),
		"Connect":    connectShape(settings),
		"webhook":    webhookShape(settings),
	}
	for name, shape := range shapes {
		t.Run(name, func(t *testing.T) {
			st := &faultyStore{Store: memstore.New()}
			do := shape(t, st)
			k := func(n int) string { return keyPrefix + name + "-" + fmt.Sprint(n) }
			do(t, k(1), "a") // completed
			do(t, k(1), "a") // replayed
			do(t, k(1), "b") // mismatch
			do(t, k(2), "fail")
			st.down.Store(true)
			do(t, k(3), "a") // store error
			st.down.Store(false)
			st.busy.Store(true)
			do(t, k(4), "a") // in progress
			st.busy.Store(false)
			do(t, "not a valid key "+k(5), "a") // an invalid key
		})
	}

	mu.Lock()
	defer mu.Unlock()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Greater(t, len(lines), 40, "every shape logged its outcomes")
	outcomes := map[string]bool{}
	for _, line := range lines {
		var l map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &l), line)
		if o, ok := l["outcome"].(string); ok {
			outcomes[o] = true
		}
		for _, raw := range []string{"alice@example.com", "order-77", "private-person", idempotency.SubjectUUID(subject), "private-path"} {
			require.NotContains(t, line, raw, "a raw identifier reached a log line")
		}
	}
	for _, o := range []idempotency.Outcome{idempotency.OutcomeCompleted, idempotency.OutcomeReplayed, idempotency.OutcomeMismatch,
		idempotency.OutcomeInProgress, idempotency.OutcomeStoreError} {
		require.True(t, outcomes[string(o)], "outcome %s was logged", o)
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func wrapShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		h, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			if req.Body == "fail" {
				return events.APIGatewayV2HTTPResponse{}, handlerFailure(req.Headers["idempotency-key"])
			}
			return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{}`}, nil
		}, idempotency.Config{Store: st, KeyFormat: idempotency.KeyOpaque, Settings: settings})
		require.NoError(t, err)
		return func(t *testing.T, key, body string) {
			_, _ = h(context.Background(), events.APIGatewayV2HTTPRequest{
				RawPath: secretPath, Headers: map[string]string{"idempotency-key": key}, Body: body,
				RequestContext: events.APIGatewayV2HTTPRequestContext{
					HTTP: events.APIGatewayV2HTTPRequestContextHTTPDescription{Method: "POST", Path: secretPath},
					Authorizer: &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
						JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": subject}},
					},
				},
			})
		}
	}
}

// failingHandler answers 201, or 500 with the key quoted when the body is
// "fail".
var failingHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	if string(body) == "fail" {
		panic(handlerFailure(r.Header.Get("Idempotency-Key")))
	}
	w.WriteHeader(http.StatusCreated)
})

func httpShape(settings idempotency.Settings, framework string) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		cfg := idempotency.Config{Store: st, KeyFormat: idempotency.KeyOpaque, Subject: idempotency.StaticSubject(subject), Settings: settings}
		var srv http.Handler
		switch framework {
		case "middleware":
			mw, err := idempotency.Middleware(cfg)
			require.NoError(t, err)
			srv = recoverer(mw(failingHandler))
		case "gin":
			gin.SetMode(gin.ReleaseMode)
			mw, err := ginidem.Middleware(cfg)
			require.NoError(t, err)
			g := gin.New()
			g.Use(gin.CustomRecoveryWithWriter(io.Discard, func(c *gin.Context, _ any) { c.AbortWithStatus(500) }))
			g.POST(secretPath, mw, gin.WrapH(failingHandler))
			srv = g
		case "echo":
			mw, err := echoidem.Middleware(cfg)
			require.NoError(t, err)
			e := echo.New()
			e.HideBanner = true
			e.POST(secretPath, echo.WrapHandler(recoverer(failingHandler)), mw)
			srv = e
		}
		return func(t *testing.T, key, body string) {
			req := httptest.NewRequest(http.MethodPost, secretPath, strings.NewReader(body))
			req.Header.Set("Idempotency-Key", key)
			srv.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
}

// recoverer answers a panic with 500, as a server's recovery does.
func recoverer(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if recover() != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

type fnInput struct{ Key, Body string }

func functionShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		f, err := idempotency.Function(func(_ context.Context, in fnInput) (string, error) {
			if in.Body == "fail" {
				return "", handlerFailure(in.Key)
			}
			return "ok", nil
		}, idempotency.FunctionConfig[fnInput]{Store: st, Name: "charge", Settings: settings,
			Key:     func(_ context.Context, in fnInput) (string, error) { return in.Key, nil },
			Scope:   func(context.Context, fnInput) (string, error) { return subject, nil },
			Payload: func(in fnInput) ([]byte, error) { return []byte(in.Body), nil }})
		require.NoError(t, err)
		return func(t *testing.T, key, body string) {
			_, _ = f(context.Background(), fnInput{key, body})
		}
	}
}

func sqsShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		h, err := idempotency.SQSHandler(func(_ context.Context, m events.SQSMessage) error {
			var in fnInput
			_ = json.Unmarshal([]byte(m.Body), &in)
			if in.Body == "fail" {
				return handlerFailure(in.Key)
			}
			return nil
		}, idempotency.FunctionConfig[events.SQSMessage]{Store: st, Name: "orders", Settings: settings,
			Key:     idempotency.SQSBodyKey(func(in fnInput) string { return in.Key }),
			Payload: idempotency.SQSBody})
		require.NoError(t, err)
		n := 0
		return func(t *testing.T, key, body string) {
			n++
			b, _ := json.Marshal(fnInput{key, body})
			_, _ = h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{{MessageId: fmt.Sprint("m-", n), Body: string(b)}}})
		}
	}
}

func grpcShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		ic, err := grpcidem.UnaryServerInterceptor(grpcidem.Config{Store: st, KeyFormat: idempotency.KeyOpaque, Settings: settings,
			Subject: func(context.Context) (string, error) { return subject, nil }})
		require.NoError(t, err)
		const method = "/private.Orders/Create"
		desc := grpc.ServiceDesc{ServiceName: "private.Orders", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{{MethodName: "Create",
			Handler: func(srv any, ctx context.Context, dec func(any) error, next grpc.UnaryServerInterceptor) (any, error) {
				in := new(wrapperspb.StringValue)
				if err := dec(in); err != nil {
					return nil, err
				}
				return next(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: method}, func(ctx context.Context, req any) (any, error) {
					if req.(*wrapperspb.StringValue).GetValue() == "fail" {
						md, _ := metadata.FromIncomingContext(ctx)
						return nil, status.Error(codes.Internal, handlerFailure(strings.Join(md.Get(grpcidem.MetadataKey), "")).Error())
					}
					return wrapperspb.String("ok"), nil
				})
			}}}}
		srv := grpc.NewServer(grpc.UnaryInterceptor(ic))
		srv.RegisterService(&desc, struct{}{})
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return func(t *testing.T, key, body string) {
			ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), grpcidem.MetadataKey, key), 10*time.Second)
			defer cancel()
			_ = conn.Invoke(ctx, method, wrapperspb.String(body), new(wrapperspb.StringValue))
		}
	}
}

func connectShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		ic, err := connectidem.NewInterceptor(connectidem.Config{Store: st, KeyFormat: idempotency.KeyOpaque, Settings: settings,
			Subject: func(context.Context) (string, error) { return subject, nil }})
		require.NoError(t, err)
		const procedure = "/private.Orders/Create"
		mux := http.NewServeMux()
		mux.Handle(procedure, connect.NewUnaryHandler(procedure, func(_ context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.StringValue], error) {
			if req.Msg.GetValue() == "fail" {
				return nil, connect.NewError(connect.CodeInternal, handlerFailure(req.Header().Get(idempotency.HeaderName)))
			}
			return connect.NewResponse(wrapperspb.String("ok")), nil
		}, connect.WithInterceptors(ic)))
		s := httptest.NewServer(mux)
		t.Cleanup(s.Close)
		client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](s.Client(), s.URL+procedure)
		return func(t *testing.T, key, body string) {
			req := connect.NewRequest(wrapperspb.String(body))
			req.Header().Set(idempotency.HeaderName, key)
			_, _ = client.CallUnary(context.Background(), req)
		}
	}
}

func webhookShape(settings idempotency.Settings) func(t *testing.T, st idemstore.Store) call {
	return func(t *testing.T, st idemstore.Store) call {
		p, err := webhook.GitHub(hookSecret)
		require.NoError(t, err)
		mw, err := webhook.Middleware(p, idempotency.Config{Store: st, Settings: settings})
		require.NoError(t, err)
		srv := recoverer(mw(failingHandler))
		return func(t *testing.T, key, body string) {
			// The body holds the key, as a delivery's may; an invalid key
			// is a delivery that does not verify.
			payload := fmt.Sprintf(`{"ref":%q,"v":%q}`, key, body)
			mac := hmac.New(sha256.New, []byte(hookSecret))
			mac.Write([]byte(payload))
			if body == "fail" {
				payload = "fail"
				mac = hmac.New(sha256.New, []byte(hookSecret))
				mac.Write([]byte(payload))
			}
			req := httptest.NewRequest(http.MethodPost, secretPath, strings.NewReader(payload))
			sig := hex.EncodeToString(mac.Sum(nil))
			if strings.HasPrefix(key, "not a valid key") {
				sig = "00"
			}
			req.Header.Set("X-Hub-Signature-256", "sha256="+sig)
			req.Header.Set("Idempotency-Key", key)
			srv.ServeHTTP(httptest.NewRecorder(), req)
		}
	}
}

var _ = errors.New
