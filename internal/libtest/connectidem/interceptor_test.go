package connectidem_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// The test service, ichido.test.Tasks, uses well-known types as its
// messages, so that no code generation is needed: Create and Get take a
// StringValue and answer a Struct (Get has no side effects); Watch streams
// StringValues.
const (
	createProcedure = "/ichido.test.Tasks/Create"
	getProcedure    = "/ichido.test.Tasks/Get"
	watchProcedure  = "/ichido.test.Tasks/Watch"
	userHeader      = "X-Test-User"
)

// protocol is one of the protocols a Connect handler serves, as a client
// option.
type protocol struct {
	name string
	opts []connect.ClientOption
}

var protocols = []protocol{
	{"connect", nil},
	{"connect-json", []connect.ClientOption{connect.WithProtoJSON()}},
	{"grpc", []connect.ClientOption{connect.WithGRPC()}},
	{"grpc-web", []connect.ClientOption{connect.WithGRPCWeb()}},
}

// tasks is the test service; runs counts the handler's runs.
type tasks struct {
	runs   atomic.Int32
	handle storekit.Handler
}

func (s *tasks) unary(ctx context.Context, req *connect.Request[wrapperspb.StringValue]) (*connect.Response[structpb.Struct], error) {
	msg, err := s.handle(ctx, s.runs.Add(1), req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(msg), nil
}

func (s *tasks) watch(_ context.Context, req *connect.Request[wrapperspb.StringValue], stream *connect.ServerStream[wrapperspb.StringValue]) error {
	s.runs.Add(1)
	for i := range 2 {
		if err := stream.Send(wrapperspb.String(fmt.Sprintf("%s-%d", req.Msg.GetValue(), i))); err != nil {
			return err
		}
	}
	return nil
}

// testUser is the tests' Config.Subject: the subject in the X-Test-User
// header, read from the call's context. A real service reads a verified
// identity instead.
func testUser(ctx context.Context) (string, error) {
	info, ok := connect.CallInfoForHandlerContext(ctx)
	if !ok {
		return "", errors.New("no call info")
	}
	return info.RequestHeader().Get(userHeader), nil
}

// harness is a real Connect handler with the interceptor, served over
// HTTP/2 with TLS by an httptest server, and a client of one protocol.
type harness struct {
	t      *testing.T
	svc    *tasks
	url    string
	client *http.Client
	opts   []connect.ClientOption
	// seen is the message name and the Go type of the last response the
	// interceptor gave the interceptor outside it.
	seen atomic.Value
}

// serve starts the test service behind the interceptor of cfg (its Subject
// and quiet Settings filled in when unset), for clients of p.
func serve(t *testing.T, p protocol, cfg connectidem.Config, handle storekit.Handler) *harness {
	t.Helper()
	storekit.Defaults(&cfg.Subject, &cfg.Settings, testUser)
	ic, err := connectidem.NewInterceptor(cfg)
	require.NoError(t, err)
	h := &harness{t: t, svc: &tasks{handle: storekit.OrAnswer(handle)}, opts: p.opts}
	outer := connect.UnaryInterceptorFunc(func(next connect.UnaryFunc) connect.UnaryFunc {
		return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
			resp, err := next(ctx, req)
			if err == nil {
				m := resp.Any().(proto.Message)
				h.seen.Store(string(m.ProtoReflect().Descriptor().FullName()))
			}
			return resp, err
		}
	})
	mux := http.NewServeMux()
	mux.Handle(createProcedure, connect.NewUnaryHandler(createProcedure, h.svc.unary, connect.WithInterceptors(outer, ic)))
	mux.Handle(getProcedure, connect.NewUnaryHandler(getProcedure, h.svc.unary, connect.WithInterceptors(outer, ic),
		connect.WithIdempotency(connect.IdempotencyNoSideEffects)))
	mux.Handle(watchProcedure, connect.NewServerStreamHandler(watchProcedure, h.svc.watch, connect.WithInterceptors(ic)))
	srv := httptest.NewUnstartedServer(mux)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	h.url, h.client = srv.URL, srv.Client()
	return h
}

// Call calls procedure as user with the idempotency keys given (none: no
// key header) and a ten-second deadline.
func (h *harness) Call(procedure, user, title string, keys ...string) storekit.Reply {
	h.t.Helper()
	client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](h.client, h.url+procedure, h.opts...)
	req := connect.NewRequest(wrapperspb.String(title))
	req.Header().Set(userHeader, user)
	for _, k := range keys {
		req.Header().Add(idempotency.HeaderName, k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var r storekit.Reply
	var header http.Header
	res, err := client.CallUnary(ctx, req)
	if err != nil {
		r.Err = err
		var ce *connect.Error
		if errors.As(err, &ce) {
			header = ce.Meta()
		}
	} else {
		r.Msg, header = res.Msg, res.Header()
	}
	r.Header, r.Replayed = header, header.Get(idempotency.ReplayedHeader) == "true"
	return r
}

// Runs and Seen, with Call, make the harness a storekit.Client.
func (h *harness) Runs() int32 { return h.svc.runs.Load() }
func (h *harness) Seen() any   { return h.seen.Load() }

// A protocol is connectidem over it as the shared cases call it
// (storekit.RPC).
func (p protocol) Configure(cfg storekit.RPCConfig) (func(*testing.T, storekit.Handler) storekit.Client, error) {
	c := connectidem.Config{Store: cfg.Store, KeyFormat: cfg.KeyFormat, Settings: cfg.Settings}
	if cfg.ProtectGet {
		c.Methods = func(string) bool { return true }
	}
	if !cfg.NoSubject {
		c.Subject = testUser
	}
	if _, err := connectidem.NewInterceptor(c); err != nil {
		return nil, err
	}
	return func(t *testing.T, handle storekit.Handler) storekit.Client { return serve(t, p, c, handle) }, nil
}

func (protocol) RecordID(prefix string, f idempotency.KeyFormat, subject, key string) (string, string, error) {
	return connectidem.RecordID(prefix, f, subject, key)
}

func (protocol) Error(code codes.Code, msg string, details ...proto.Message) error {
	ce := connect.NewError(connect.Code(code), errors.New(msg))
	for _, m := range details {
		d, err := connect.NewErrorDetail(m)
		if err != nil {
			return err
		}
		ce.AddDetail(d)
	}
	return ce
}

func (protocol) Status(err error) (storekit.Status, error) {
	var ce *connect.Error
	if !errors.As(err, &ce) {
		return storekit.Status{}, fmt.Errorf("not a *connect.Error: %w", err)
	}
	st := storekit.Status{Code: codes.Code(ce.Code()), Message: ce.Message()}
	for _, d := range ce.Details() {
		v, err := d.Value()
		if err != nil {
			return storekit.Status{}, err
		}
		st.Details = append(st.Details, v)
	}
	return st, nil
}

func (protocol) RetryAfter(r storekit.Reply) (string, bool) {
	return http.Header(r.Header).Get("Retry-After"), true
}

func (protocol) ResponseType() string { return "google.protobuf.Struct" }
func (protocol) ErrorDomain() string  { return connectidem.ErrorDomain }

// TestBehaviour runs the contract over each protocol a Connect handler
// serves, on each store: memstore, PostgreSQL, Redis and DynamoDB.
func TestBehaviour(t *testing.T) {
	t.Parallel()
	var rpcs []storekit.Protocol
	for _, p := range protocols {
		rpcs = append(rpcs, storekit.Protocol{Name: p.name, RPC: p})
	}
	storekit.RunBehaviour(t, rpcs...)
}

// TestCalls runs the cases that need no store server on every protocol:
// refusals before the store, opaque keys, a missing key allowed,
// concurrent duplicates and an invalid Config. A header may join the same
// key twice, so the list joins two.
func TestCalls(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			storekit.RunCalls(t, p, func(key string) string { return key + ", " + uuid.NewString() })
		})
	}
}

// TestPassThrough: a procedure without side effects (served over GET too),
// one Config.Methods leaves out, and streaming procedures run untouched: no
// key needed, nothing stored, no replay header.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := serve(t, protocols[0], connectidem.Config{Store: store}, nil)
	key := uuid.NewString()
	h.opts = []connect.ClientOption{connect.WithHTTPGet()}
	for range 2 {
		r := h.Call(storekit.GetMethod, "alice", "a", key)
		require.NoError(t, r.Err)
		require.False(t, r.Replayed)
	}
	require.Equal(t, int32(2), h.svc.runs.Load())

	only := serve(t, protocols[0], connectidem.Config{Store: store, Methods: func(p string) bool { return p == getProcedure }}, nil)
	require.NoError(t, only.Call(storekit.CreateMethod, "alice", "a").Err)
	require.False(t, only.Call(storekit.CreateMethod, "alice", "a", key).Replayed)
	require.Equal(t, int32(2), only.svc.runs.Load())

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.StringValue](h.client, h.url+watchProcedure)
	stream, err := client.CallServerStream(context.Background(), connect.NewRequest(wrapperspb.String("w")))
	require.NoError(t, err)
	var got []string
	for stream.Receive() {
		got = append(got, stream.Msg().GetValue())
	}
	require.NoError(t, stream.Err())
	require.NoError(t, stream.Close())
	require.Equal(t, []string{"w-0", "w-1"}, got)
	require.Equal(t, int32(3), h.svc.runs.Load())

	records, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, records)
}
