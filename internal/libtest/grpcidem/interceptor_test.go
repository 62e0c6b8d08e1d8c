package grpcidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
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

// handleFunc is what the test service's unary methods do on their n-th run.
type handleFunc func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error)

// answer is the default handleFunc: the title and the run's number.
func answer(_ context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"title": req.GetValue(), "run": float64(n)})
}

// tasks is the test service; runs counts the unary handler's runs.
type tasks struct {
	runs   atomic.Int32
	handle handleFunc
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

// quiet are Settings whose log and metric lines go nowhere.
func quiet() idempotency.Settings {
	return idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}
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
func serve(t *testing.T, cfg grpcidem.Config, handle handleFunc) *harness {
	t.Helper()
	return serveDesc(t, cfg, handle, &tasksDesc)
}

// serveDesc is serve for the service desc describes.
func serveDesc(t *testing.T, cfg grpcidem.Config, handle handleFunc, desc *grpc.ServiceDesc) *harness {
	t.Helper()
	if cfg.Subject == nil {
		cfg.Subject = testUser
	}
	if cfg.Logger == nil {
		cfg.Logger, cfg.Metrics = quiet().Logger, quiet().Metrics
	}
	ic, err := grpcidem.UnaryServerInterceptor(cfg)
	require.NoError(t, err)
	if handle == nil {
		handle = answer
	}
	h := &harness{t: t, svc: &tasks{handle: handle}}
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

// reply is what a client got: the message, the response header and the
// error.
type reply struct {
	msg    *structpb.Struct
	header metadata.MD
	err    error
}

func (r reply) replayed() bool {
	v := r.header.Get(grpcidem.ReplayedKey)
	return len(v) == 1 && v[0] == "true"
}

// call calls method as user with the idempotency keys given (none: no key
// metadata) and a ten-second deadline.
func (h *harness) call(method, user, title string, keys ...string) reply {
	h.t.Helper()
	md := metadata.Pairs(userHeader, user)
	for _, k := range keys {
		md.Append(grpcidem.MetadataKey, k)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 10*time.Second)
	defer cancel()
	r := reply{msg: new(structpb.Struct)}
	r.err = h.conn.Invoke(ctx, method, wrapperspb.String(title), r.msg, grpc.Header(&r.header))
	return r
}

func (h *harness) create(user, title string, keys ...string) reply {
	h.t.Helper()
	return h.call(createMethod, user, title, keys...)
}

// requireRefusal checks a refusal: its code, its ErrorInfo reason (the
// library's code in upper case) and whether it carries a RetryInfo of one
// second.
func requireRefusal(t *testing.T, err error, code codes.Code, reason string, retry bool) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "a status: %v", err)
	require.Equal(t, code, st.Code(), st.Message())
	var info *errdetails.ErrorInfo
	var retryInfo *errdetails.RetryInfo
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retryInfo = d
		}
	}
	require.NotNil(t, info, "an ErrorInfo detail")
	require.Equal(t, strings.ToUpper(reason), info.GetReason())
	require.Equal(t, grpcidem.ErrorDomain, info.GetDomain())
	if retry {
		require.NotNil(t, retryInfo, "a RetryInfo detail")
		require.Equal(t, time.Second, retryInfo.GetRetryDelay().AsDuration())
	} else {
		require.Nil(t, retryInfo)
	}
}

// TestBehaviour runs the contract over a real gRPC connection on each
// store: memstore, PostgreSQL, Redis and DynamoDB.
func TestBehaviour(t *testing.T) {
	t.Parallel()
	for _, b := range storekit.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			store := b.New(t)
			cases := []struct {
				name string
				run  func(t *testing.T)
			}{
				{"FirstCallRunsAndRepeatReplays", func(t *testing.T) { firstCallRunsAndRepeatReplays(t, store) }},
				{"KeyReusedWithAnotherRequest", func(t *testing.T) { keyReused(t, store) }},
				{"InFlight", func(t *testing.T) { inFlight(t, store) }},
				{"InFlightWaitForResult", func(t *testing.T) { inFlightWait(t, store) }},
				{"StoreDown", func(t *testing.T) { storeDown(t, b.Down(t)) }},
				{"LostClaimReply", func(t *testing.T) { lostClaimReply(t, store) }},
				{"HandlerErrorReleased", func(t *testing.T) { handlerErrorReleased(t, store) }},
				{"HandlerErrorStored", func(t *testing.T) { handlerErrorStored(t, store) }},
				{"DeadlineIsTheLease", func(t *testing.T) { deadlineIsTheLease(t, store) }},
			}
			if b.Misconfigured != nil {
				cases = append(cases, struct {
					name string
					run  func(t *testing.T)
				}{"StoreMisconfigured", func(t *testing.T) { storeMisconfigured(t, b.Misconfigured(t)) }})
			}
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.run(t)
				})
			}
		})
	}
}

// firstCallRunsAndRepeatReplays: the first call runs the handler; a repeat
// (the key bare, quoted, or in upper case) gets the same message back, of
// the method's own type, with the replay marker, and the handler does not
// run again. The record is where RecordID says.
func firstCallRunsAndRepeatReplays(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, nil)
	user, key := uuid.NewString(), uuid.NewString()

	first := h.create(user, "write the report", key)
	require.NoError(t, first.err)
	require.False(t, first.replayed())
	require.Equal(t, float64(1), first.msg.GetFields()["run"].GetNumberValue())

	for _, k := range []string{key, `"` + key + `"`, strings.ToUpper(key)} {
		again := h.create(user, "write the report", k)
		require.NoError(t, again.err)
		require.True(t, again.replayed(), "the replay marker, key %s", k)
		require.True(t, proto.Equal(first.msg, again.msg), "the first message: %v", again.msg)
		require.Equal(t, "*structpb.Struct", h.seen.Load(), "the replay is a message of the method's own type")
	}
	require.Equal(t, int32(1), h.svc.runs.Load(), "the handler ran once")

	// Another user's same key is another record.
	other := h.create(uuid.NewString(), "write the report", key)
	require.NoError(t, other.err)
	require.False(t, other.replayed())
	require.Equal(t, int32(2), h.svc.runs.Load())

	userID, recordKey, err := grpcidem.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	rec, ok, err := store.(idemstore.Admin).Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, ok, "the record is kept under RecordID")
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
}

// keyReused: the same key with another request, or on another method, is
// refused with FailedPrecondition; the handler does not run.
func keyReused(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	require.NoError(t, h.create(user, "a", key).err)

	requireRefusal(t, h.create(user, "b", key).err, codes.FailedPrecondition, idempotency.CodeKeyReused, false)
	requireRefusal(t, h.call(getMethod, user, "a", key).err, codes.FailedPrecondition, idempotency.CodeKeyReused, false)
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// blocking returns a handleFunc whose first run signals started and waits
// for release; later runs answer at once.
func blocking() (handleFunc, chan struct{}, chan struct{}) {
	started, release := make(chan struct{}), make(chan struct{})
	return func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		if n == 1 {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return answer(ctx, n, req)
	}, started, release
}

// inFlight: a repeat while the first call runs is refused with Aborted and
// a RetryInfo; once the first completes, the repeat gets its answer.
func inFlight(t *testing.T, store idemstore.Store) {
	handle, started, release := blocking()
	h := serve(t, grpcidem.Config{Store: store}, handle)
	user, key := uuid.NewString(), uuid.NewString()

	firstDone := make(chan reply, 1)
	go func() { firstDone <- h.create(user, "a", key) }()
	<-started
	requireRefusal(t, h.create(user, "a", key).err, codes.Aborted, idempotency.CodeKeyInUse, true)
	close(release)
	first := <-firstDone
	require.NoError(t, first.err)

	again := h.create(user, "a", key)
	require.NoError(t, again.err)
	require.True(t, again.replayed())
	require.True(t, proto.Equal(first.msg, again.msg))
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// inFlightWait: with WaitForResult, a repeat that arrives while the first
// call runs waits for its answer and replays it.
func inFlightWait(t *testing.T, store idemstore.Store) {
	handle, started, release := blocking()
	settings := quiet()
	settings.WaitForResult = 8 * time.Second
	h := serve(t, grpcidem.Config{Store: store, Settings: settings}, handle)
	user, key := uuid.NewString(), uuid.NewString()

	firstDone, secondDone := make(chan reply, 1), make(chan reply, 1)
	go func() { firstDone <- h.create(user, "a", key) }()
	<-started
	go func() { secondDone <- h.create(user, "a", key) }()
	// Without the wait the repeat would be refused well within this pause.
	time.Sleep(300 * time.Millisecond)
	close(release)
	first, second := <-firstDone, <-secondDone
	require.NoError(t, first.err)
	require.NoError(t, second.err)
	require.True(t, second.replayed())
	require.True(t, proto.Equal(first.msg, second.msg))
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// storeDown: a store that cannot be reached gives Unavailable with a
// RetryInfo, and the handler does not run.
func storeDown(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, nil)
	requireRefusal(t, h.create(uuid.NewString(), "a", uuid.NewString()).err, codes.Unavailable, idempotency.CodeStoreUnavailable, true)
	require.Equal(t, int32(0), h.svc.runs.Load())
}

// storeMisconfigured: a store that refuses for good gives Internal without
// a RetryInfo, and the handler does not run.
func storeMisconfigured(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, nil)
	requireRefusal(t, h.create(uuid.NewString(), "a", uuid.NewString()).err, codes.Internal, idempotency.CodeStoreMisconfigured, false)
	require.Equal(t, int32(0), h.svc.runs.Load())
}

// lostClaimReply: a claim that commits and loses its reply is recovered in
// the same call (the engine claims again with its owner token): the
// handler runs once and the repeat replays.
func lostClaimReply(t *testing.T, store idemstore.Store) {
	lossy := &storekit.LostReplyStore{Store: store}
	h := serve(t, grpcidem.Config{Store: lossy}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	lossy.Armed.Store(true)
	first := h.create(user, "a", key)
	require.NoError(t, first.err)
	require.Equal(t, int32(1), lossy.Cuts.Load(), "the claim's reply was lost")

	again := h.create(user, "a", key)
	require.NoError(t, again.err)
	require.True(t, again.replayed())
	require.True(t, proto.Equal(first.msg, again.msg))
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// handlerErrorReleased: a handler error whose code is not stored reaches
// the client unchanged and releases the key: the retry runs again.
func handlerErrorReleased(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		if n == 1 {
			return nil, status.Error(codes.Unavailable, "the database is restarting")
		}
		return answer(ctx, n, req)
	})
	user, key := uuid.NewString(), uuid.NewString()
	first := h.create(user, "a", key)
	require.Equal(t, codes.Unavailable, status.Code(first.err))
	require.Equal(t, "the database is restarting", status.Convert(first.err).Message())

	retry := h.create(user, "a", key)
	require.NoError(t, retry.err)
	require.False(t, retry.replayed())
	require.Equal(t, float64(2), retry.msg.GetFields()["run"].GetNumberValue())
	require.Equal(t, int32(2), h.svc.runs.Load())
}

// handlerErrorStored: a handler error a retry would get again
// (InvalidArgument) is kept: the repeat gets the same code, message and
// details with the replay marker, and the handler does not run again.
func handlerErrorStored(t *testing.T, store idemstore.Store) {
	h := serve(t, grpcidem.Config{Store: store}, func(context.Context, int32, *wrapperspb.StringValue) (*structpb.Struct, error) {
		st, err := status.New(codes.InvalidArgument, "the title is too short").WithDetails(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "value", Description: "at least 3 characters"}},
		})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	})
	user, key := uuid.NewString(), uuid.NewString()
	first := h.create(user, "a", key)
	again := h.create(user, "a", key)
	require.Equal(t, codes.InvalidArgument, status.Code(first.err))
	require.False(t, first.replayed())
	require.True(t, again.replayed())
	require.True(t, proto.Equal(status.Convert(first.err).Proto(), status.Convert(again.err).Proto()), "the same status: %v", again.err)
	require.Len(t, status.Convert(again.err).Details(), 1)
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// deadlineIsTheLease: the client's deadline, which the server's context
// carries, ends the claim's lease (plus LeaseMargin), as a Lambda
// invocation's does.
func deadlineIsTheLease(t *testing.T, store idemstore.Store) {
	user, key := uuid.NewString(), uuid.NewString()
	userID, recordKey, err := grpcidem.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	var lease time.Duration
	h := serve(t, grpcidem.Config{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			return nil, status.Error(codes.Internal, "no deadline")
		}
		rec, found, err := store.(idemstore.Admin).Get(ctx, userID, recordKey)
		if err != nil || !found {
			return nil, status.Errorf(codes.Internal, "the record: %t %v", found, err)
		}
		lease = rec.LeaseUntil.Sub(deadline)
		return answer(ctx, n, req)
	})
	require.NoError(t, h.create(user, "a", key).err)
	require.InDelta(t, idempotency.DefaultLeaseMargin.Seconds(), lease.Seconds(), 0.5, "the lease ends at the deadline plus the margin")
}

// TestRefusedBeforeTheStore: calls without a user or with no valid key are
// refused before the store is consulted, and the handler does not run.
func TestRefusedBeforeTheStore(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	uuidKeys := serve(t, grpcidem.Config{Store: store}, nil)
	opaqueKeys := serve(t, grpcidem.Config{Store: store, KeyFormat: idempotency.KeyOpaque}, nil)
	key := uuid.NewString()
	for _, c := range []struct {
		name   string
		h      *harness
		user   string
		keys   []string
		code   codes.Code
		reason string
	}{
		{"no user", uuidKeys, "", []string{key}, codes.Unauthenticated, idempotency.CodeUnauthenticated},
		{"no user, no key", uuidKeys, "", nil, codes.Unauthenticated, idempotency.CodeUnauthenticated},
		{"no key", uuidKeys, "alice", nil, codes.InvalidArgument, idempotency.CodeKeyMissing},
		{"empty key", uuidKeys, "alice", []string{""}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"not a UUID", uuidKeys, "alice", []string{"order-1"}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"a UUID version 1", uuidKeys, "alice", []string{"6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"two different keys", uuidKeys, "alice", []string{key, uuid.NewString()}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"a comma-joined list", uuidKeys, "alice", []string{key + "," + key}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"a broken quoted string", uuidKeys, "alice", []string{`"` + key}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"opaque, too long", opaqueKeys, "alice", []string{strings.Repeat("k", idempotency.MaxOpaqueKeyLength+1)}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"opaque, a bare comma", opaqueKeys, "alice", []string{"a,b"}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.h.create(c.user, "a", c.keys...)
			requireRefusal(t, r.err, c.code, c.reason, false)
		})
	}
	require.Equal(t, int32(0), uuidKeys.svc.runs.Load())
	require.Equal(t, int32(0), opaqueKeys.svc.runs.Load())
	records, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, records, "the store was not consulted")
}

// TestOpaqueKeys: an opaque key is compared exactly, bare or quoted (a
// quoted one may hold a comma), and the same key twice is one key.
func TestOpaqueKeys(t *testing.T) {
	t.Parallel()
	h := serve(t, grpcidem.Config{Store: memstore.New(), KeyFormat: idempotency.KeyOpaque}, nil)
	user := uuid.NewString()
	require.NoError(t, h.create(user, "a", "order-1").err)
	again := h.create(user, "a", `"order-1"`, "order-1")
	require.NoError(t, again.err)
	require.True(t, again.replayed())
	require.False(t, h.create(user, "a", "ORDER-1").replayed(), "compared exactly")
	require.NoError(t, h.create(user, "a", `"a,b"`).err)
	require.True(t, h.create(user, "a", `"a,b"`).replayed())
	require.Equal(t, int32(3), h.svc.runs.Load())
}

// TestAllowMissingKey: with AllowMissingKey a call without a key runs
// unprotected, every time; one with a malformed key is still refused.
func TestAllowMissingKey(t *testing.T) {
	t.Parallel()
	settings := quiet()
	settings.AllowMissingKey = true
	h := serve(t, grpcidem.Config{Store: memstore.New(), Settings: settings}, nil)
	user := uuid.NewString()
	require.NoError(t, h.create(user, "a").err)
	second := h.create(user, "a")
	require.NoError(t, second.err)
	require.False(t, second.replayed())
	require.Equal(t, int32(2), h.svc.runs.Load())
	requireRefusal(t, h.create(user, "a", "nope").err, codes.InvalidArgument, idempotency.CodeKeyInvalid, false)
	requireRefusal(t, h.create("", "a").err, codes.Unauthenticated, idempotency.CodeUnauthenticated, false)
}

// TestPassThrough: methods Config.Methods leaves out, and streaming
// methods, run untouched: no key needed, nothing stored, no marker.
func TestPassThrough(t *testing.T) {
	t.Parallel()
	store := memstore.New()
	h := serve(t, grpcidem.Config{Store: store, Methods: func(m string) bool { return m == createMethod }}, nil)
	key := uuid.NewString()
	for range 2 {
		r := h.call(getMethod, "alice", "a", key)
		require.NoError(t, r.err)
		require.False(t, r.replayed())
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

// TestConcurrentDuplicates: of many calls with one key at once, the
// handler runs once; every other call gets its answer (waiting for it) or
// is refused as in flight.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	settings := quiet()
	settings.WaitForResult = 5 * time.Second
	h := serve(t, grpcidem.Config{Store: memstore.New(), Settings: settings}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	var wg sync.WaitGroup
	replies := make([]reply, 16)
	for i := range replies {
		wg.Go(func() { replies[i] = h.create(user, "a", key) })
	}
	wg.Wait()
	for _, r := range replies {
		require.NoError(t, r.err)
		require.True(t, proto.Equal(replies[0].msg, r.msg))
	}
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// TestConfig: an invalid Config is refused with a message naming the field.
func TestConfig(t *testing.T) {
	t.Parallel()
	_, err := grpcidem.UnaryServerInterceptor(grpcidem.Config{})
	require.ErrorContains(t, err, "Config.Store is nil")
	require.ErrorContains(t, err, "Config.Subject is nil")
	_, err = grpcidem.UnaryServerInterceptor(grpcidem.Config{Store: memstore.New(), Subject: testUser, KeyFormat: 7})
	require.ErrorContains(t, err, "Config.KeyFormat")
	_, err = grpcidem.UnaryServerInterceptor(grpcidem.Config{Store: memstore.New(), Subject: testUser, Settings: idempotency.Settings{TTL: -time.Second}})
	require.ErrorContains(t, err, "TTL")
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
		r := h.call("/ichido.test.Reads/Get", "alice", "a")
		require.NoError(t, r.err)
		require.False(t, r.replayed())
	}
	requireRefusal(t, h.call("/ichido.test.Reads/Create", "alice", "a").err, codes.InvalidArgument, idempotency.CodeKeyMissing, false)
	require.NoError(t, h.call("/ichido.test.Reads/Create", "alice", "a", key).err)
	require.True(t, h.call("/ichido.test.Reads/Create", "alice", "a", key).replayed())
	require.Equal(t, int32(3), h.svc.runs.Load())
}
