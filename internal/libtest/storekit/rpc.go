package storekit

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// The RPC adapters (grpcidem, connectidem) share the cases below. Each
// serves the test service, ichido.test.Tasks, behind its interceptor and
// calls it as its clients do. The service's unary methods, Create and Get,
// take a StringValue and answer a Struct.

// Handler is what the test service's unary methods do on their n-th run.
type Handler func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error)

// Answer is the default Handler: the title and the run's number.
func Answer(_ context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
	return structpb.NewStruct(map[string]any{"title": req.GetValue(), "run": float64(n)})
}

// Blocking returns a Handler whose first run signals started and waits for
// release. Later runs answer at once.
func Blocking() (handle Handler, started, release chan struct{}) {
	started, release = make(chan struct{}), make(chan struct{})
	return func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		if n == 1 {
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return Answer(ctx, n, req)
	}, started, release
}

// Quiet are Settings whose log and metric lines go nowhere.
func Quiet() idempotency.Settings {
	return idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}
}

// Defaults fills in what an adapter's test Config leaves unset: subject
// as its Subject, and Quiet's lines when its Settings have no Logger.
func Defaults(cfgSubject *func(context.Context) (string, error), s *idempotency.Settings, subject func(context.Context) (string, error)) {
	if *cfgSubject == nil {
		*cfgSubject = subject
	}
	if s.Logger == nil {
		s.Logger, s.Metrics = Quiet().Logger, Quiet().Metrics
	}
}

// OrAnswer is handle, or Answer when handle is nil.
func OrAnswer(handle Handler) Handler {
	if handle == nil {
		return Answer
	}
	return handle
}

// RPCConfig is what a case sets of an adapter's Config. The adapter adds
// its test Subject, and Quiet's lines when Settings has no Logger.
type RPCConfig struct {
	Store     idemstore.Store
	KeyFormat idempotency.KeyFormat
	Settings  idempotency.Settings
	// ProtectGet protects Get as well where the adapter would pass it
	// through: Connect's Get is declared without side effects.
	ProtectGet bool
	// NoSubject leaves the Config's Subject nil.
	NoSubject bool
}

// Status is an RPC error as the shared cases read it.
type Status struct {
	Code    codes.Code
	Message string
	Details []proto.Message
}

// RPC is an adapter under test, over one protocol.
type RPC interface {
	// Configure makes the adapter's interceptor of cfg. It returns the
	// constructor's error, or what starts the test service behind the
	// interceptor. A nil handle is Answer.
	Configure(cfg RPCConfig) (serve func(t *testing.T, handle Handler) Client, err error)
	// RecordID is the adapter's RecordID.
	RecordID(prefix string, f idempotency.KeyFormat, subject, key string) (userID, recordKey string, err error)
	// Error is the error a handler returns with code, msg and details.
	Error(code codes.Code, msg string, details ...proto.Message) error
	// Status reads an error a client got. It fails on an error that is not
	// the adapter's status, or on details it cannot decode.
	Status(err error) (Status, error)
	// RetryAfter is the Retry-After the reply carries, and false where the
	// protocol has none.
	RetryAfter(r Reply) (string, bool)
	// ResponseType is what Client.Seen holds after a response of the
	// method's own type.
	ResponseType() string
	// ErrorDomain is the domain of the adapter's ErrorInfo details.
	ErrorDomain() string
}

// The test service's unary methods, as a Client calls them.
const (
	CreateMethod = "/ichido.test.Tasks/Create"
	GetMethod    = "/ichido.test.Tasks/Get"
)

// Client calls the test service.
type Client interface {
	// Call calls method as user with the idempotency keys given (none: no
	// key) and a ten-second deadline.
	Call(method, user, title string, keys ...string) Reply
	// Runs counts the unary handler's runs.
	Runs() int32
	// Seen names the type of the last response the interceptor gave the
	// interceptor outside it.
	Seen() any
}

// Reply is what a client got.
type Reply struct {
	Msg *structpb.Struct
	Err error
	// Replayed reports the replay marker.
	Replayed bool
	// Header is the response's header or metadata, an error's included.
	Header map[string][]string
}

// Serve starts the test service behind rpc's interceptor of cfg.
func Serve(t *testing.T, rpc RPC, cfg RPCConfig, handle Handler) Client {
	t.Helper()
	serve, err := rpc.Configure(cfg)
	require.NoError(t, err)
	return serve(t, handle)
}

// RequireRefusal checks a refusal: its code, its ErrorInfo reason (the
// library's code in upper case), and whether it carries a RetryInfo of one
// second (and Retry-After: 1, where the protocol has it).
func RequireRefusal(t *testing.T, rpc RPC, r Reply, code codes.Code, reason string, retry bool) {
	t.Helper()
	st, err := rpc.Status(r.Err)
	require.NoError(t, err, "a status: %v", r.Err)
	require.Equal(t, code, st.Code, st.Message)
	var info *errdetails.ErrorInfo
	var retryInfo *errdetails.RetryInfo
	for _, d := range st.Details {
		switch d := d.(type) {
		case *errdetails.ErrorInfo:
			info = d
		case *errdetails.RetryInfo:
			retryInfo = d
		}
	}
	require.NotNil(t, info, "an ErrorInfo detail")
	require.Equal(t, strings.ToUpper(reason), info.GetReason())
	require.Equal(t, rpc.ErrorDomain(), info.GetDomain())
	retryAfter, hasRetryAfter := rpc.RetryAfter(r)
	if retry {
		require.NotNil(t, retryInfo, "a RetryInfo detail")
		require.Equal(t, time.Second, retryInfo.GetRetryDelay().AsDuration())
		if hasRetryAfter {
			require.Equal(t, "1", retryAfter)
		}
	} else {
		require.Nil(t, retryInfo)
		if hasRetryAfter {
			require.Empty(t, retryAfter)
		}
	}
}

// RunBehaviour runs the contract on each store (memstore, PostgreSQL,
// Redis and DynamoDB) over each of rpcs. A protocol's name, when it has
// one, is a level of the tests' names.
func RunBehaviour(t *testing.T, rpcs ...Protocol) {
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			store := b.New(t)
			cases := []struct {
				name string
				run  func(t *testing.T, rpc RPC)
			}{
				{"FirstCallRunsAndRepeatReplays", func(t *testing.T, rpc RPC) { firstCallRunsAndRepeatReplays(t, rpc, store) }},
				{"KeyReusedWithAnotherRequest", func(t *testing.T, rpc RPC) { keyReused(t, rpc, store) }},
				{"InFlight", func(t *testing.T, rpc RPC) { inFlight(t, rpc, store) }},
				{"InFlightWaitForResult", func(t *testing.T, rpc RPC) { inFlightWait(t, rpc, store) }},
				{"StoreDown", func(t *testing.T, rpc RPC) { storeDown(t, rpc, b.Down(t)) }},
				{"LostClaimReply", func(t *testing.T, rpc RPC) { lostClaimReply(t, rpc, store) }},
				{"HandlerErrorReleased", func(t *testing.T, rpc RPC) { handlerErrorReleased(t, rpc, store) }},
				{"HandlerErrorStored", func(t *testing.T, rpc RPC) { handlerErrorStored(t, rpc, store) }},
				{"DeadlineIsTheLease", func(t *testing.T, rpc RPC) { deadlineIsTheLease(t, rpc, store) }},
			}
			if b.Misconfigured != nil {
				cases = append(cases, struct {
					name string
					run  func(t *testing.T, rpc RPC)
				}{"StoreMisconfigured", func(t *testing.T, rpc RPC) { storeMisconfigured(t, rpc, b.Misconfigured(t)) }})
			}
			for _, p := range rpcs {
				run := func(t *testing.T) {
					for _, c := range cases {
						t.Run(c.name, func(t *testing.T) {
							t.Parallel()
							c.run(t, p.RPC)
						})
					}
				}
				if p.Name == "" {
					run(t)
					continue
				}
				t.Run(p.Name, func(t *testing.T) {
					t.Parallel()
					run(t)
				})
			}
		})
	}
}

// Protocol is an RPC under a name of its own.
type Protocol struct {
	Name string
	RPC  RPC
}

// firstCallRunsAndRepeatReplays: the first call runs the handler. A repeat
// (the key bare, quoted, or in upper case) gets the same message back, of
// the method's own type, with the replay marker, and the handler does not
// run again. The record is where RecordID says.
func firstCallRunsAndRepeatReplays(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store}, nil)
	user, key := uuid.NewString(), uuid.NewString()

	first := h.Call(CreateMethod, user, "write the report", key)
	require.NoError(t, first.Err)
	require.False(t, first.Replayed)
	require.Equal(t, float64(1), first.Msg.GetFields()["run"].GetNumberValue())

	for _, k := range []string{key, `"` + key + `"`, strings.ToUpper(key)} {
		again := h.Call(CreateMethod, user, "write the report", k)
		require.NoError(t, again.Err)
		require.True(t, again.Replayed, "the replay marker, key %s", k)
		require.True(t, proto.Equal(first.Msg, again.Msg), "the first message: %v", again.Msg)
		require.Equal(t, rpc.ResponseType(), h.Seen(), "the replay is a message of the method's own type")
	}
	require.Equal(t, int32(1), h.Runs(), "the handler ran once")

	other := h.Call(CreateMethod, uuid.NewString(), "write the report", key)
	require.NoError(t, other.Err)
	require.False(t, other.Replayed, "another user's same key is another record")
	require.Equal(t, int32(2), h.Runs())

	userID, recordKey, err := rpc.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	rec, ok, err := store.(idemstore.Admin).Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, ok, "the record is kept under RecordID")
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
}

// keyReused: the same key with another request, or on another method, is
// refused with FailedPrecondition. The handler does not run.
func keyReused(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store, ProtectGet: true}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	require.NoError(t, h.Call(CreateMethod, user, "a", key).Err)

	RequireRefusal(t, rpc, h.Call(CreateMethod, user, "b", key), codes.FailedPrecondition, idempotency.CodeKeyReused, false)
	RequireRefusal(t, rpc, h.Call(GetMethod, user, "a", key), codes.FailedPrecondition, idempotency.CodeKeyReused, false)
	require.Equal(t, int32(1), h.Runs())
}

// inFlight: a repeat while the first call runs is refused with Aborted and
// a retry hint. Once the first completes, the repeat gets its answer.
func inFlight(t *testing.T, rpc RPC, store idemstore.Store) {
	handle, started, release := Blocking()
	h := Serve(t, rpc, RPCConfig{Store: store}, handle)
	user, key := uuid.NewString(), uuid.NewString()

	firstDone := make(chan Reply, 1)
	go func() { firstDone <- h.Call(CreateMethod, user, "a", key) }()
	<-started
	RequireRefusal(t, rpc, h.Call(CreateMethod, user, "a", key), codes.Aborted, idempotency.CodeKeyInUse, true)
	close(release)
	first := <-firstDone
	require.NoError(t, first.Err)

	requireReplays(t, h, first, user, key)
}

// requireReplays checks that a repeat of first replays it and that the
// handler ran once.
func requireReplays(t *testing.T, h Client, first Reply, user, key string) {
	t.Helper()
	again := h.Call(CreateMethod, user, "a", key)
	require.NoError(t, again.Err)
	require.True(t, again.Replayed)
	require.True(t, proto.Equal(first.Msg, again.Msg))
	require.Equal(t, int32(1), h.Runs())
}

// inFlightWait: with WaitForResult, a repeat that arrives while the first
// call runs waits for its answer and replays it.
func inFlightWait(t *testing.T, rpc RPC, store idemstore.Store) {
	handle, started, release := Blocking()
	settings := Quiet()
	settings.WaitForResult = 8 * time.Second
	h := Serve(t, rpc, RPCConfig{Store: store, Settings: settings}, handle)
	user, key := uuid.NewString(), uuid.NewString()

	firstDone, secondDone := make(chan Reply, 1), make(chan Reply, 1)
	go func() { firstDone <- h.Call(CreateMethod, user, "a", key) }()
	<-started
	go func() { secondDone <- h.Call(CreateMethod, user, "a", key) }()
	// Without the wait the repeat would be refused well within this pause.
	time.Sleep(300 * time.Millisecond)
	close(release)
	first, second := <-firstDone, <-secondDone
	require.NoError(t, first.Err)
	require.NoError(t, second.Err)
	require.True(t, second.Replayed)
	require.True(t, proto.Equal(first.Msg, second.Msg))
	require.Equal(t, int32(1), h.Runs())
}

// storeDown: a store that cannot be reached gives Unavailable with a retry
// hint, and the handler does not run.
func storeDown(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store}, nil)
	RequireRefusal(t, rpc, h.Call(CreateMethod, uuid.NewString(), "a", uuid.NewString()), codes.Unavailable, idempotency.CodeStoreUnavailable, true)
	require.Equal(t, int32(0), h.Runs())
}

// storeMisconfigured: a store that refuses for good gives Internal without
// a retry hint, and the handler does not run.
func storeMisconfigured(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store}, nil)
	RequireRefusal(t, rpc, h.Call(CreateMethod, uuid.NewString(), "a", uuid.NewString()), codes.Internal, idempotency.CodeStoreMisconfigured, false)
	require.Equal(t, int32(0), h.Runs())
}

// lostClaimReply: a claim that commits and loses its reply is recovered in
// the same call (the engine claims again with its owner token). The
// handler runs once and the repeat replays.
func lostClaimReply(t *testing.T, rpc RPC, store idemstore.Store) {
	lossy := &LostReplyStore{Store: store}
	h := Serve(t, rpc, RPCConfig{Store: lossy}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	lossy.Armed.Store(true)
	first := h.Call(CreateMethod, user, "a", key)
	require.NoError(t, first.Err)
	require.Equal(t, int32(1), lossy.Cuts.Load(), "the claim's reply was lost")

	requireReplays(t, h, first, user, key)
}

// handlerErrorReleased: a handler error whose code is not stored reaches
// the client unchanged and releases the key: the retry runs again.
func handlerErrorReleased(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		if n == 1 {
			return nil, rpc.Error(codes.Unavailable, "the database is restarting")
		}
		return Answer(ctx, n, req)
	})
	user, key := uuid.NewString(), uuid.NewString()
	st, err := rpc.Status(h.Call(CreateMethod, user, "a", key).Err)
	require.NoError(t, err)
	require.Equal(t, codes.Unavailable, st.Code)
	require.Equal(t, "the database is restarting", st.Message)

	retry := h.Call(CreateMethod, user, "a", key)
	require.NoError(t, retry.Err)
	require.False(t, retry.Replayed)
	require.Equal(t, float64(2), retry.Msg.GetFields()["run"].GetNumberValue())
	require.Equal(t, int32(2), h.Runs())
}

// handlerErrorStored: a handler error a retry would get again
// (InvalidArgument) is kept. The repeat gets the same code, message and
// details with the replay marker, and the handler does not run again.
func handlerErrorStored(t *testing.T, rpc RPC, store idemstore.Store) {
	h := Serve(t, rpc, RPCConfig{Store: store}, func(context.Context, int32, *wrapperspb.StringValue) (*structpb.Struct, error) {
		return nil, rpc.Error(codes.InvalidArgument, "the title is too short", &errdetails.BadRequest{
			FieldViolations: []*errdetails.BadRequest_FieldViolation{{Field: "value", Description: "at least 3 characters"}},
		})
	})
	user, key := uuid.NewString(), uuid.NewString()
	first, again := h.Call(CreateMethod, user, "a", key), h.Call(CreateMethod, user, "a", key)
	want, err := rpc.Status(first.Err)
	require.NoError(t, err)
	got, err := rpc.Status(again.Err)
	require.NoError(t, err)
	require.False(t, first.Replayed)
	require.True(t, again.Replayed)
	require.Equal(t, codes.InvalidArgument, want.Code)
	require.Equal(t, want.Code, got.Code)
	require.Equal(t, want.Message, got.Message)
	require.Len(t, got.Details, 1)
	require.Len(t, want.Details, 1)
	require.True(t, proto.Equal(want.Details[0], got.Details[0]), "the same detail: %v", got.Details[0])
	require.Equal(t, int32(1), h.Runs())
}

// deadlineIsTheLease: the client's deadline, which the handler's context
// carries, ends the claim's lease (plus LeaseMargin), as a Lambda
// invocation's does.
func deadlineIsTheLease(t *testing.T, rpc RPC, store idemstore.Store) {
	user, key := uuid.NewString(), uuid.NewString()
	userID, recordKey, err := rpc.RecordID("", idempotency.KeyUUIDv4, user, key)
	require.NoError(t, err)
	var lease time.Duration
	h := Serve(t, rpc, RPCConfig{Store: store}, func(ctx context.Context, n int32, req *wrapperspb.StringValue) (*structpb.Struct, error) {
		deadline, ok := ctx.Deadline()
		if !ok {
			return nil, rpc.Error(codes.Internal, "no deadline")
		}
		rec, found, err := store.(idemstore.Admin).Get(ctx, userID, recordKey)
		if err != nil || !found {
			return nil, rpc.Error(codes.Internal, fmt.Sprintf("the record: %t %v", found, err))
		}
		lease = rec.LeaseUntil.Sub(deadline)
		return Answer(ctx, n, req)
	})
	require.NoError(t, h.Call(CreateMethod, user, "a", key).Err)
	require.InDelta(t, idempotency.DefaultLeaseMargin.Seconds(), lease.Seconds(), 0.5, "the lease ends at the deadline plus the margin")
}

// RunCalls runs the cases that need no store server, on memstore, over
// rpc. commaJoined is the adapter's list of keys in one value, which must
// be refused.
func RunCalls(t *testing.T, rpc RPC, commaJoined func(key string) string) {
	for _, c := range []struct {
		name string
		run  func(t *testing.T)
	}{
		{"RefusedBeforeTheStore", func(t *testing.T) { refusedBeforeTheStore(t, rpc, commaJoined) }},
		{"OpaqueKeys", func(t *testing.T) { opaqueKeyExact(t, rpc) }},
		{"AllowMissingKey", func(t *testing.T) { allowMissingKey(t, rpc) }},
		{"ConcurrentDuplicates", func(t *testing.T) { concurrentDuplicates(t, rpc) }},
		{"InvalidConfig", func(t *testing.T) { invalidConfig(t, rpc) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t)
		})
	}
}

// refusedBeforeTheStore: calls without a user or with no valid key are
// refused before the store is consulted, and the handler does not run.
func refusedBeforeTheStore(t *testing.T, rpc RPC, commaJoined func(key string) string) {
	store := memstore.New()
	uuidKeys := Serve(t, rpc, RPCConfig{Store: store}, nil)
	opaqueKeys := Serve(t, rpc, RPCConfig{Store: store, KeyFormat: idempotency.KeyOpaque}, nil)
	key := uuid.NewString()
	for _, c := range []struct {
		name   string
		h      Client
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
		{"a comma-joined list", uuidKeys, "alice", []string{commaJoined(key)}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"a broken quoted string", uuidKeys, "alice", []string{`"` + key}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"opaque, too long", opaqueKeys, "alice", []string{strings.Repeat("k", idempotency.MaxOpaqueKeyLength+1)}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
		{"opaque, a bare comma", opaqueKeys, "alice", []string{"a,b"}, codes.InvalidArgument, idempotency.CodeKeyInvalid},
	} {
		t.Run(c.name, func(t *testing.T) {
			RequireRefusal(t, rpc, c.h.Call(CreateMethod, c.user, "a", c.keys...), c.code, c.reason, false)
		})
	}
	require.Equal(t, int32(0), uuidKeys.Runs())
	require.Equal(t, int32(0), opaqueKeys.Runs())
	records, err := store.List(context.Background(), idemstore.ListQuery{})
	require.NoError(t, err)
	require.Empty(t, records, "the store was not consulted")
}

// opaqueKeyExact: an opaque key is compared exactly, bare or quoted (a quoted
// one may hold a comma), and the same key twice is one key.
func opaqueKeyExact(t *testing.T, rpc RPC) {
	h := Serve(t, rpc, RPCConfig{Store: memstore.New(), KeyFormat: idempotency.KeyOpaque}, nil)
	user := uuid.NewString()
	require.NoError(t, h.Call(CreateMethod, user, "a", "order-1").Err)
	again := h.Call(CreateMethod, user, "a", `"order-1"`, "order-1")
	require.NoError(t, again.Err)
	require.True(t, again.Replayed)
	require.False(t, h.Call(CreateMethod, user, "a", "ORDER-1").Replayed, "compared exactly")
	require.NoError(t, h.Call(CreateMethod, user, "a", `"a,b"`).Err)
	require.True(t, h.Call(CreateMethod, user, "a", `"a,b"`).Replayed)
	require.Equal(t, int32(3), h.Runs())
}

// allowMissingKey: with AllowMissingKey a call without a key runs
// unprotected, every time. One with a malformed key is still refused.
func allowMissingKey(t *testing.T, rpc RPC) {
	settings := Quiet()
	settings.AllowMissingKey = true
	h := Serve(t, rpc, RPCConfig{Store: memstore.New(), Settings: settings}, nil)
	user := uuid.NewString()
	require.NoError(t, h.Call(CreateMethod, user, "a").Err)
	second := h.Call(CreateMethod, user, "a")
	require.NoError(t, second.Err)
	require.False(t, second.Replayed)
	require.Equal(t, int32(2), h.Runs())
	RequireRefusal(t, rpc, h.Call(CreateMethod, user, "a", "nope"), codes.InvalidArgument, idempotency.CodeKeyInvalid, false)
	RequireRefusal(t, rpc, h.Call(CreateMethod, "", "a"), codes.Unauthenticated, idempotency.CodeUnauthenticated, false)
}

// concurrentDuplicates: of many calls with one key at once, the handler
// runs once, and every other call waits for its answer.
func concurrentDuplicates(t *testing.T, rpc RPC) {
	settings := Quiet()
	settings.WaitForResult = 5 * time.Second
	h := Serve(t, rpc, RPCConfig{Store: memstore.New(), Settings: settings}, nil)
	user, key := uuid.NewString(), uuid.NewString()
	var wg sync.WaitGroup
	replies := make([]Reply, 16)
	for i := range replies {
		wg.Go(func() { replies[i] = h.Call(CreateMethod, user, "a", key) })
	}
	wg.Wait()
	for _, r := range replies {
		require.NoError(t, r.Err)
		require.True(t, proto.Equal(replies[0].Msg, r.Msg))
	}
	require.Equal(t, int32(1), h.Runs())
}

// invalidConfig: an invalid Config is refused with a message naming the
// field.
func invalidConfig(t *testing.T, rpc RPC) {
	_, err := rpc.Configure(RPCConfig{NoSubject: true})
	require.ErrorContains(t, err, "Config.Store is nil")
	require.ErrorContains(t, err, "Config.Subject is nil")
	_, err = rpc.Configure(RPCConfig{Store: memstore.New(), KeyFormat: 7})
	require.ErrorContains(t, err, "Config.KeyFormat")
	_, err = rpc.Configure(RPCConfig{Store: memstore.New(), Settings: idempotency.Settings{TTL: -time.Second}})
	require.ErrorContains(t, err, "TTL")
}
