package grpcidem_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// userKey is where authenticate keeps the caller it verified.
type userKey struct{}

// authenticate stands for a real authentication interceptor: it verifies
// the caller's credentials and puts the subject into the context.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if tokens := md.Get("authorization"); len(tokens) == 1 && tokens[0] == "Bearer alice-token" {
		ctx = context.WithValue(ctx, userKey{}, "alice")
	}
	return next(ctx, req)
}

// counter is a service of one method, Next, that answers how many times it ran.
type counter struct{ runs int }

// counterService is what protoc-gen-go-grpc would generate for it.
var counterService = grpc.ServiceDesc{
	ServiceName: "example.Counter",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{MethodName: "Next", Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		next := func(context.Context, any) (any, error) {
			c := srv.(*counter)
			c.runs++
			return wrapperspb.Int64(int64(c.runs)), nil
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/example.Counter/Next"}, next)
	}}},
}

func Example() {
	idem, err := grpcidem.UnaryServerInterceptor(grpcidem.Config{
		Store: memstore.New(), // pgstore, redisstore or dynamostore in production
		Subject: func(ctx context.Context) (string, error) {
			user, _ := ctx.Value(userKey{}).(string)
			return user, nil
		},
		Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, idem))
	srv.RegisterService(&counterService, &counter{})
	lis := bufconn.Listen(1 << 20)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient("passthrough:///counter",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()

	call := func(key, note string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(),
			"authorization", "Bearer alice-token", grpcidem.MetadataKey, key)
		var header metadata.MD
		out := new(wrapperspb.Int64Value)
		if err := conn.Invoke(ctx, "/example.Counter/Next", wrapperspb.String(note), out, grpc.Header(&header)); err != nil {
			fmt.Println(status.Code(err))
			return
		}
		fmt.Printf("%d replayed=%t\n", out.GetValue(), strings.Join(header.Get(grpcidem.ReplayedKey), ",") == "true")
	}
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "first")
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "first")     // a retry: replayed
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "different") // the key reused
	call("3f2b7c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b", "second")
	// Output:
	// 1 replayed=false
	// 1 replayed=true
	// FailedPrecondition
	// 2 replayed=false
}
