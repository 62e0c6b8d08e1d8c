package grpcidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/internal/libtest/storekit"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// The test service, ichido.test.Tasks, is written by hand with well-known
// types as its messages, so that no code generation is needed: Create and
// Get take a StringValue and answer a Struct; Watch streams StringValues.
const (
	createMethod = "/ichido.test.Tasks/Create"
	getMethod    = "/ichido.test.Tasks/Get"
	watchMethod  = "/ichido.test.Tasks/Watch"
	userHeader   = "x-test-user"
)

// tasks is the test service; runs counts the unary handler's runs.
type tasks struct {
	runs   atomic.Int32
	handle storekit.Handler
}

func (s *tasks) unary(ctx context.Context, req any) (any, error) {
	return s.handle(ctx, s.runs.Add(1), req.(*wrapperspb.StringValue))
}

// unaryMethod is the descriptor of the unary method name of service, as
// protoc-gen-go-grpc would generate it.
func unaryMethod(service, name string) grpc.MethodDesc {
	return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		s := srv.(*tasks)
		if ic == nil {
			return s.unary(ctx, in)
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + service + "/" + name}, s.unary)
	}}
}

var tasksDesc = grpc.ServiceDesc{
	ServiceName: "ichido.test.Tasks",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{unaryMethod("ichido.test.Tasks", "Create"), unaryMethod("ichido.test.Tasks", "Get")},
	Streams: []grpc.StreamDesc{{StreamName: "Watch", ServerStreams: true, Handler: func(srv any, stream grpc.ServerStream) error {
		in := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(in); err != nil {
			return err
		}
		srv.(*tasks).runs.Add(1)
		for i := range 2 {
			if err := stream.SendMsg(wrapperspb.String(fmt.Sprintf("%s-%d", in.GetValue(), i))); err != nil {
				return err
			}
		}
		return nil
	}}},
}

// testUser is the tests' Config.Subject: the subject in the x-test-user
// metadata. A real service reads a verified identity instead.
func testUser(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(userHeader); len(v) == 1 {
		return v[0], nil
	}
	return "", nil
}

// harness is a real gRPC server with the interceptor, on a loopback port,
// and a client connected to it.
type harness struct {
	t    *testing.T
	svc  *tasks
	conn *grpc.ClientConn
	// seen is the Go type of the last response the interceptor gave the
	// interceptor outside it.
	seen atomic.Value
}

// serve starts the test service behind the interceptor of cfg (its
// Subject and quiet Settings filled in when unset).
func serve(t *testing.T, cfg grpcidem.Config, handle storekit.Handler) *harness {
	t.Helper()
	return serveDesc(t, cfg, handle, &tasksDesc)
}

// serveDesc is serve for the service desc describes.
func serveDesc(t *testing.T, cfg grpcidem.Config, handle storekit.Handler, desc *grpc.ServiceDesc) *harness {
	t.Helper()
	storekit.Defaults(&cfg.Subject, &cfg.Settings, testUser)
	ic, err := grpcidem.UnaryServerInterceptor(cfg)
	require.NoError(t, err)
	h := &harness{t: t, svc: &tasks{handle: storekit.OrAnswer(handle)}}
	outer := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
		resp, err := next(ctx, req)
		h.seen.Store(fmt.Sprintf("%T", resp))
		return resp, err
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outer, ic))
	srv.RegisterService(desc, h.svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	h.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = h.conn.Close() })
	return h
}

// Call calls method as user with the idempotency keys given (none: no key
// metadata) and a ten-second deadline.
func (h *harness) Call(method, user, title string, keys ...string) storekit.Reply {
	h.t.Helper()
	md := metadata.Pairs(userHeader, user)
	for _, k := range keys {
		md.Append(grpcidem.MetadataKey, k)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	var header metadata.MD
	r := storekit.Reply{Msg: new(structpb.Struct)}
	r.Err = h.conn.Invoke(ctx, method, wrapperspb.String(title), r.Msg, grpc.Header(&header))
	v := header.Get(grpcidem.ReplayedKey)
	r.Replayed, r.Header = len(v) == 1 && v[0] == "true", header
	return r
}

// Runs and Seen, with Call, make the harness a storekit.Client.
func (h *harness) Runs() int32 { return h.svc.runs.Load() }
func (h *harness) Seen() any   { return h.seen.Load() }

// adapter is grpcidem as the shared cases call it (storekit.RPC).
type adapter struct{}

// Configure ignores ProtectGet: Get is protected by default.
func (adapter) Configure(cfg storekit.RPCConfig) (func(*testing.T, storekit.Handler) storekit.Client, error) {
	c := grpcidem.Config{Store: cfg.Store, KeyFormat: cfg.KeyFormat, Settings: cfg.Settings}
	if !cfg.NoSubject {
		c.Subject = testUser
	}
	if _, err := grpcidem.UnaryServerInterceptor(c); err != nil {
		return nil, err
	}
	return func(t *testing.T, handle storekit.Handler) storekit.Client { return serve(t, c, handle) }, nil
}

func (adapter) RecordID(prefix string, f idempotency.KeyFormat, subject, key string) (string, string, error) {
	return grpcidem.RecordID(prefix, f, subject, key)
}

func (adapter) Error(code codes.Code, msg string, details ...proto.Message) error {
	st, err := status.New(code, msg).WithDetails(v1(details)...)
	if err != nil {
		return err
	}
	return st.Err()
}

func (adapter) Status(err error) (storekit.Status, error) {
	st, ok := status.FromError(err)
	if !ok {
		return storekit.Status{}, fmt.Errorf("not a status: %w", err)
	}
	out := storekit.Status{Code: st.Code(), Message: st.Message()}
	for _, d := range st.Details() {
		m, ok := d.(proto.Message)
		if !ok {
			return storekit.Status{}, fmt.Errorf("a detail that does not decode: %v", d)
		}
		out.Details = append(out.Details, m)
	}
	return out, nil
}

// v1 gives details as WithDetails takes them.
func v1(details []proto.Message) []protoadapt.MessageV1 {
	out := make([]protoadapt.MessageV1, len(details))
	for i, d := range details {
		out[i] = protoadapt.MessageV1Of(d)
	}
	return out
}

func (adapter) RetryAfter(storekit.Reply) (string, bool) { return "", false }
func (adapter) ResponseType() string                     { return "*structpb.Struct" }
func (adapter) ErrorDomain() string                      { return grpcidem.ErrorDomain }

// TestBehaviour runs the contract over a real gRPC connection on each
// store: memstore, PostgreSQL, Redis and DynamoDB.
func TestBehaviour(t *testing.T) {
	t.Parallel()
	storekit.RunBehaviour(t, storekit.Protocol{RPC: adapter{}})
}

// TestCalls runs the cases that need no store server: refusals before
// the store, opaque keys, a missing key allowed, concurrent duplicates and
// an invalid Config. A key repeated in one value is a list in metadata.
func TestCalls(t *testing.T) {
	t.Parallel()
	storekit.RunCalls(t, adapter{}, func(key string) string { return key + "," + key })
}

// TestPassThrough: methods Config.Methods leaves out, and streaming
// methods, run untouched: no key needed, nothing stored, no marker.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := serve(t, grpcidem.Config{Store: store, Methods: func(m string) bool { return m == createMethod }}, nil)
	key := uuid.NewString()
	for range 2 {
		r := h.Call(storekit.GetMethod, "alice", "a", key)
		require.NoError(t, r.Err)
		require.False(t, r.Replayed)
	}
	require.Equal(t, int32(2), h.svc.runs.Load())

	stream, err := h.conn.NewStream(context.Background(), &grpc.StreamDesc{ServerStreams: true}, watchMethod)
	require.NoError(t, err)
	require.NoError(t, stream.SendMsg(wrapperspb.String("w")))
	require.NoError(t, stream.CloseSend())
	var got []string
	for {
		m := new(wrapperspb.StringValue)
		if err := stream.RecvMsg(m); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		got = append(got, m.GetValue())
	}
	require.Equal(t, []string{"w-0", "w-1"}, got)
	require.Equal(t, int32(3), h.svc.runs.Load())

	records, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, records)
}

// TestNoSideEffectsPassThrough: by default a method declared
// idempotency_level = NO_SIDE_EFFECTS (registered in GlobalFiles, as
// generated code registers it) runs untouched, and every other is
// protected.
func TestNoSideEffectsPassThrough(t *testing.T) {
	t.Parallel()
	file := &descriptorpb.FileDescriptorProto{
		Name:       proto.String("ichido/test/reads.proto"),
		Package:    proto.String("ichido.test"),
		Dependency: []string{"google/protobuf/wrappers.proto", "google/protobuf/struct.proto"},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Reads"),
			Method: []*descriptorpb.MethodDescriptorProto{
				{Name: proto.String("Create"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.Struct")},
				{Name: proto.String("Get"), InputType: proto.String(".google.protobuf.StringValue"), OutputType: proto.String(".google.protobuf.Struct"),
					Options: &descriptorpb.MethodOptions{IdempotencyLevel: descriptorpb.MethodOptions_NO_SIDE_EFFECTS.Enum()}},
			},
		}},
		Syntax: proto.String("proto3"),
	}
	if _, err := protoregistry.GlobalFiles.FindFileByPath(file.GetName()); err != nil { // once per process (-count)
		fd, err := protodesc.NewFile(file, protoregistry.GlobalFiles)
		require.NoError(t, err)
		require.NoError(t, protoregistry.GlobalFiles.RegisterFile(fd))
	}

	reads := grpc.ServiceDesc{
		ServiceName: "ichido.test.Reads",
		HandlerType: (*any)(nil),
		Methods:     []grpc.MethodDesc{unaryMethod("ichido.test.Reads", "Create"), unaryMethod("ichido.test.Reads", "Get")},
	}
	h := serveDesc(t, grpcidem.Config{Store: memstore.New()}, nil, &reads)
	key := uuid.NewString()
	for range 2 {
		r := h.Call("/ichido.test.Reads/Get", "alice", "a")
		require.NoError(t, r.Err)
		require.False(t, r.Replayed)
	}
	storekit.RequireRefusal(t, adapter{}, h.Call("/ichido.test.Reads/Create", "alice", "a"), codes.InvalidArgument, idempotency.CodeKeyMissing, false)
	require.NoError(t, h.Call("/ichido.test.Reads/Create", "alice", "a", key).Err)
	require.True(t, h.Call("/ichido.test.Reads/Create", "alice", "a", key).Replayed)
	require.Equal(t, int32(3), h.svc.runs.Load())
}
