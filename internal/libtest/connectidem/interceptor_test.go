package connectidem_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
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

// handleFunc is what the test service's unary procedures do on their n-th
// run.
type handleFunc func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error)

// answer is the default handleFunc: the title and the run's number.
func answer(_ context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"title": req.GetValue(), "run": float64(n)})
}

// tasks is the test service; runs counts the handler's runs.
type tasks struct {
	runs   atomic.Int32
	handle handleFunc
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

// quiet are Settings whose log and metric lines go nowhere.
func quiet() idempotency.Settings {
	return idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}
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
func serve(t *testing.T, p protocol, cfg connectidem.Config, handle handleFunc) *harness {
	t.Helper()
	if cfg.Subject == nil {
		cfg.Subject = testUser
	}
	if cfg.Logger == nil {
		cfg.Logger, cfg.Metrics = quiet().Logger, quiet().Metrics
	}
	ic, err := connectidem.NewInterceptor(cfg)
	require.NoError(t, err)
	if handle == nil {
		handle = answer
	}
	h := &harness{t: t, svc: &tasks{handle: handle}, opts: p.opts}
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

// reply is what a client got: the message, the response header (an
// error's metadata) and the error.
type reply struct {
	msg    *structpb.Struct
	header http.Header
	err    error
}

func (r reply) replayed() bool { return r.header.Get(idempotency.ReplayedHeader) == "true" }

// call calls procedure as user with the idempotency keys given (none: no
// key header) and a ten-second deadline.
func (h *harness) call(procedure, user, title string, keys ...string) reply {
	h.t.Helper()
	client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](h.client, h.url+procedure, h.opts...)
	req := connect.NewRequest(wrapperspb.String(title))
	req.Header().Set(userHeader, user)
	for _, k := range keys {
		req.Header().Add(idempotency.HeaderName, k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := client.CallUnary(ctx, req)
	if err != nil {
		r := reply{err: err}
		var ce *connect.Error
		if errors.As(err, &ce) {
			r.header = ce.Meta()
		}
		return r
	}
	return reply{msg: res.Msg, header: res.Header()}
}

func (h *harness) create(user, title string, keys ...string) reply {
	h.t.Helper()
	return h.call(createProcedure, user, title, keys...)
}

// requireRefusal checks a refusal: its code, its ErrorInfo reason (the
// library's code in upper case) and whether it carries a RetryInfo of one
// second and Retry-After: 1.
func requireRefusal(t *testing.T, r reply, code connect.Code, reason string, retry bool) {
	t.Helper()
	var ce *connect.Error
	require.ErrorAs(t, r.err, &ce)
	require.Equal(t, code, ce.Code(), ce.Message())
	var info *errdetails.ErrorInfo
	var retryInfo *errdetails.RetryInfo
	for _, d := range ce.Details() {
		v, err := d.Value()
		require.NoError(t, err)
		switch v := v.(type) {
		case *errdetails.ErrorInfo:
			info = v
		case *errdetails.RetryInfo:
			retryInfo = v
		}
	}
	require.NotNil(t, info, "an ErrorInfo detail")
	require.Equal(t, strings.ToUpper(reason), info.GetReason())
	require.Equal(t, connectidem.ErrorDomain, info.GetDomain())
	if retry {
		require.NotNil(t, retryInfo, "a RetryInfo detail")
		require.Equal(t, time.Second, retryInfo.GetRetryDelay().AsDuration())
		require.Equal(t, "1", r.header.Get("Retry-After"))
	} else {
		require.Nil(t, retryInfo)
		require.Empty(t, r.header.Get("Retry-After"))
	}
}

// TestBehaviour runs the contract over each protocol a Connect handler
// serves, on each store: memstore, PostgreSQL, Redis and DynamoDB.
func TestBehaviour(t *testing.T) {
	t.Parallel()
	for _, b := range storekit.Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			store := b.New(t)
			type testCase struct {
				name string
				run  func(t *testing.T, p protocol)
			}
			cases := []testCase{
				{"FirstCallRunsAndRepeatReplays", func(t *testing.T, p protocol) { firstCallRunsAndRepeatReplays(t, p, store) }},
				{"KeyReusedWithAnotherRequest", func(t *testing.T, p protocol) { keyReused(t, p, store) }},
				{"InFlight", func(t *testing.T, p protocol) { inFlight(t, p, store) }},
				{"InFlightWaitForResult", func(t *testing.T, p protocol) { inFlightWait(t, p, store) }},
				{"StoreDown", func(t *testing.T, p protocol) { storeDown(t, p, b.Down(t)) }},
				{"LostClaimReply", func(t *testing.T, p protocol) { lostClaimReply(t, p, store) }},
				{"HandlerErrorReleased", func(t *testing.T, p protocol) { handlerErrorReleased(t, p, store) }},
				{"HandlerErrorStored", func(t *testing.T, p protocol) { handlerErrorStored(t, p, store) }},
				{"DeadlineIsTheLease", func(t *testing.T, p protocol) { deadlineIsTheLease(t, p, store) }},
			}
			if b.Misconfigured != nil {
				cases = append(cases, testCase{"StoreMisconfigured", func(t *testing.T, p protocol) { storeMisconfigured(t, p, b.Misconfigured(t)) }})
			}
			for _, p := range protocols {
				t.Run(p.name, func(t *testing.T) {
					t.Parallel()
					for _, c := range cases {
						t.Run(c.name, func(t *testing.T) {
							t.Parallel()
							c.run(t, p)
						})
					}
				})
			}
		})
	}
}

// firstCallRunsAndRepeatReplays: the first call runs the handler; a repeat
// (the key bare, quoted, or in upper case) gets the same message back,
// whose type is the procedure's own, with the replay header, and the
// handler does not run again. The record is where RecordID says.
func firstCallRunsAndRepeatReplays(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store}, nil)
	user, key := uuid.NewString(), uuid.NewString()

	first := h.create(user, "write the report", key)
	require.NoError(t, first.err)
	require.False(t, first.replayed())
	require.Equal(t, float64(1), first.msg.GetFields()["run"].GetNumberValue())

	for _, k := range []string{key, `"` + key + `"`, strings.ToUpper(key)} {
		again := h.create(user, "write the report", k)
		require.NoError(t, again.err)
		require.True(t, again.replayed(), "the replay header, key %s", k)
		require.True(t, proto.Equal(first.msg, again.msg), "the first message: %v", again.msg)
		require.Equal(t, "google.protobuf.Struct", h.seen.Load(), "the replay is a message of the procedure's own type")
	}
	require.Equal(t, int32(1), h.svc.runs.Load(), "the handler ran once")

	other := h.create(uuid.NewString(), "write the report", key)
	require.NoError(t, other.err)
	require.False(t, other.replayed(), "another user's same key is another record")
	require.Equal(t, int32(2), h.svc.runs.Load())

	userID, recordKey, err := connectidem.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	rec, ok, err := store.(idemstore.Admin).Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, ok, "the record is kept under RecordID")
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
}

// keyReused: the same key with another request, or on another procedure,
// is refused with FailedPrecondition; the handler does not run.
func keyReused(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store, Methods: func(string) bool { return true }}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	require.NoError(t, h.create(user, "a", key).err)

	requireRefusal(t, h.create(user, "b", key), connect.CodeFailedPrecondition, idempotency.CodeKeyReused, false)
	requireRefusal(t, h.call(getProcedure, user, "a", key), connect.CodeFailedPrecondition, idempotency.CodeKeyReused, false)
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

// inFlight: a repeat while the first call runs is refused with Aborted,
// a RetryInfo and Retry-After; once the first completes, the repeat gets
// its answer.
func inFlight(t *testing.T, p protocol, store idemstore.Store) {
	handle, started, release := blocking()
	h := serve(t, p, connectidem.Config{Store: store}, handle)
	user, key := uuid.NewString(), uuid.NewString()

	firstDone := make(chan reply, 1)
	go func() { firstDone <- h.create(user, "a", key) }()
	<-started
	requireRefusal(t, h.create(user, "a", key), connect.CodeAborted, idempotency.CodeKeyInUse, true)
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
func inFlightWait(t *testing.T, p protocol, store idemstore.Store) {
	handle, started, release := blocking()
	settings := quiet()
	settings.WaitForResult = 8 * time.Second
	h := serve(t, p, connectidem.Config{Store: store, Settings: settings}, handle)
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
// RetryInfo and Retry-After, and the handler does not run.
func storeDown(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store}, nil)
	requireRefusal(t, h.create(uuid.NewString(), "a", uuid.NewString()), connect.CodeUnavailable, idempotency.CodeStoreUnavailable, true)
	require.Equal(t, int32(0), h.svc.runs.Load())
}

// storeMisconfigured: a store that refuses for good gives Internal without
// a retry hint, and the handler does not run.
func storeMisconfigured(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store}, nil)
	requireRefusal(t, h.create(uuid.NewString(), "a", uuid.NewString()), connect.CodeInternal, idempotency.CodeStoreMisconfigured, false)
	require.Equal(t, int32(0), h.svc.runs.Load())
}

// lostClaimReply: a claim that commits and loses its reply is recovered in
// the same call (the engine claims again with its owner token): the
// handler runs once and the repeat replays.
func lostClaimReply(t *testing.T, p protocol, store idemstore.Store) {
	lossy := &storekit.LostReplyStore{Store: store}
	h := serve(t, p, connectidem.Config{Store: lossy}, nil)
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
func handlerErrorReleased(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		if n == 1 {
			return nil, connect.NewError(connect.CodeUnavailable, errors.New("the database is restarting"))
		}
		return answer(ctx, n, req)
	})
	user, key := uuid.NewString(), uuid.NewString()
	first := h.create(user, "a", key)
	var ce *connect.Error
	require.ErrorAs(t, first.err, &ce)
	require.Equal(t, connect.CodeUnavailable, ce.Code())
	require.Equal(t, "the database is restarting", ce.Message())

	retry := h.create(user, "a", key)
	require.NoError(t, retry.err)
	require.False(t, retry.replayed())
	require.Equal(t, float64(2), retry.msg.GetFields()["run"].GetNumberValue())
	require.Equal(t, int32(2), h.svc.runs.Load())
}

// handlerErrorStored: a handler error a retry would get again
// (InvalidArgument) is kept: the repeat gets the same code, message and
// details with the replay header, and the handler does not run again.
func handlerErrorStored(t *testing.T, p protocol, store idemstore.Store) {
	h := serve(t, p, connectidem.Config{Store: store}, func(context.Context, int32, *wrapperspb.StringValue) (*structpb.Struct, error) {
		ce := connect.NewError(connect.CodeInvalidArgument, errors.New("the title is too short"))
		d, err := connect.NewErrorDetail(&errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "value", Description: "at least 3 characters"}},
		})
		if err != nil {
			return nil, err
		}
		ce.AddDetail(d)
		return nil, ce
	})
	user, key := uuid.NewString(), uuid.NewString()
	first, again := h.create(user, "a", key), h.create(user, "a", key)
	var firstErr, againErr *connect.Error
	require.ErrorAs(t, first.err, &firstErr)
	require.ErrorAs(t, again.err, &againErr)
	require.False(t, first.replayed())
	require.True(t, again.replayed())
	require.Equal(t, connect.CodeInvalidArgument, againErr.Code())
	require.Equal(t, firstErr.Message(), againErr.Message())
	require.Len(t, againErr.Details(), 1)
	want, err := firstErr.Details()[0].Value()
	require.NoError(t, err)
	got, err := againErr.Details()[0].Value()
	require.NoError(t, err)
	require.True(t, proto.Equal(want, got), "the same detail: %v", got)
	require.Equal(t, int32(1), h.svc.runs.Load())
}

// deadlineIsTheLease: the client's deadline, which every protocol sends
// and the handler's context carries, ends the claim's lease (plus
// LeaseMargin), as a Lambda invocation's does.
func deadlineIsTheLease(t *testing.T, p protocol, store idemstore.Store) {
	user, key := uuid.NewString(), uuid.NewString()
	userID, recordKey, err := connectidem.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	var lease time.Duration
	h := serve(t, p, connectidem.Config{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			return nil, connect.NewError(connect.CodeInternal, errors.New("no deadline"))
		}
		rec, found, err := store.(idemstore.Admin).Get(ctx, userID, recordKey)
		if err != nil || !found {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("the record: %t %w", found, err))
		}
		lease = rec.LeaseUntil.Sub(deadline)
		return answer(ctx, n, req)
	})
	require.NoError(t, h.create(user, "a", key).err)
	require.InDelta(t, idempotency.DefaultLeaseMargin.Seconds(), lease.Seconds(), 0.5, "the lease ends at the deadline plus the margin")
}

// TestRefusedBeforeTheStore: calls without a user or with no valid key are
// refused before the store is consulted, on every protocol, and the
// handler does not run.
func TestRefusedBeforeTheStore(t *testing.T) {
	t.Parallel()
	key := uuid.NewString()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			store := memstore.New()
			uuidKeys := serve(t, p, connectidem.Config{Store: store}, nil)
			opaqueKeys := serve(t, p, connectidem.Config{Store: store, KeyFormat: idempotency.KeyOpaque}, nil)
			for _, c := range []struct {
				name   string
				h      *harness
				user   string
				keys   []string
				code   connect.Code
				reason string
			}{
				{"no user", uuidKeys, "", []string{key}, connect.CodeUnauthenticated, idempotency.CodeUnauthenticated},
				{"no user, no key", uuidKeys, "", nil, connect.CodeUnauthenticated, idempotency.CodeUnauthenticated},
				{"no key", uuidKeys, "alice", nil, connect.CodeInvalidArgument, idempotency.CodeKeyMissing},
				{"empty key", uuidKeys, "alice", []string{""}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"not a UUID", uuidKeys, "alice", []string{"order-1"}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"a UUID version 1", uuidKeys, "alice", []string{"6ba7b810-9dad-11d1-80b4-00c04fd430c8"}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"two different keys", uuidKeys, "alice", []string{key, uuid.NewString()}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"a comma-joined list", uuidKeys, "alice", []string{key + ", " + uuid.NewString()}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"a broken quoted string", uuidKeys, "alice", []string{`"` + key}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"opaque, too long", opaqueKeys, "alice", []string{strings.Repeat("k", idempotency.MaxOpaqueKeyLength+1)}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
				{"opaque, a bare comma", opaqueKeys, "alice", []string{"a,b"}, connect.CodeInvalidArgument, idempotency.CodeKeyInvalid},
			} {
				requireRefusal(t, c.h.create(c.user, "a", c.keys...), c.code, c.reason, false)
			}
			require.Equal(t, int32(0), uuidKeys.svc.runs.Load())
			require.Equal(t, int32(0), opaqueKeys.svc.runs.Load())
			records, err := store.List(context.Background(), idemstore.ListQuery{})
			require.NoError(t, err)
			require.Empty(t, records, "the store was not consulted")
		})
	}
}

// TestOpaqueKeys: an opaque key is compared exactly, bare or quoted (a
// quoted one may hold a comma), and the same key twice is one key.
func TestOpaqueKeys(t *testing.T) {
	t.Parallel()
	h := serve(t, protocols[0], connectidem.Config{Store: memstore.New(), KeyFormat: idempotency.KeyOpaque}, nil)
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
	h := serve(t, protocols[0], connectidem.Config{Store: memstore.New(), Settings: settings}, nil)
	user := uuid.NewString()
	require.NoError(t, h.create(user, "a").err)
	second := h.create(user, "a")
	require.NoError(t, second.err)
	require.False(t, second.replayed())
	require.Equal(t, int32(2), h.svc.runs.Load())
	requireRefusal(t, h.create(user, "a", "nope"), connect.CodeInvalidArgument, idempotency.CodeKeyInvalid, false)
	requireRefusal(t, h.create("", "a"), connect.CodeUnauthenticated, idempotency.CodeUnauthenticated, false)
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
		r := h.call(getProcedure, "alice", "a", key)
		require.NoError(t, r.err)
		require.False(t, r.replayed())
	}
	require.Equal(t, int32(2), h.svc.runs.Load())

	only := serve(t, protocols[0], connectidem.Config{Store: store, Methods: func(p string) bool { return p == getProcedure }}, nil)
	require.NoError(t, only.create("alice", "a").err)
	require.False(t, only.create("alice", "a", key).replayed())
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

// TestConcurrentDuplicates: of many calls with one key at once, the
// handler runs once; every other call waits for its answer.
func TestConcurrentDuplicates(t *testing.T) {
	t.Parallel()
	settings := quiet()
	settings.WaitForResult = 5 * time.Second
	h := serve(t, protocols[2], connectidem.Config{Store: memstore.New(), Settings: settings}, nil)
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
	_, err := connectidem.NewInterceptor(connectidem.Config{})
	require.ErrorContains(t, err, "Config.Store is nil")
	require.ErrorContains(t, err, "Config.Subject is nil")
	_, err = connectidem.NewInterceptor(connectidem.Config{Store: memstore.New(), Subject: testUser, KeyFormat: 7})
	require.ErrorContains(t, err, "Config.KeyFormat")
	_, err = connectidem.NewInterceptor(connectidem.Config{Store: memstore.New(), Subject: testUser, Settings: idempotency.Settings{TTL: -time.Second}})
	require.ErrorContains(t, err, "TTL")
}
