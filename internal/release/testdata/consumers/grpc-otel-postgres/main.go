// A gRPC service on a direct PostgreSQL connection, traced with
// OpenTelemetry.
package main

import (
	"context"
	"log"
	"net"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/otelidem"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

type userKey struct{}

// authenticate verifies the caller and keeps its subject in the context.
func authenticate(ctx context.Context, req any, _ *grpc.UnaryServerInfo, next grpc.UnaryHandler) (any, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if tokens := md.Get("authorization"); len(tokens) == 1 && tokens[0] == "Bearer alice-token" {
		ctx = context.WithValue(ctx, userKey{}, "alice")
	}
	return next(ctx, req)
}

type counter struct{ runs int64 }

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
			return wrapperspb.Int64(c.runs), nil
		}
		return ic(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/example.Counter/Next"}, next)
	}}},
}

func main() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgstore.Migrate(ctx, pool, nil); err != nil {
		log.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	defer func() { _ = tp.Shutdown(ctx) }()

	store, err := pgstore.New(pool, nil)
	if err != nil {
		log.Fatal(err)
	}
	idem, err := grpcidem.UnaryServerInterceptor(grpcidem.Config{
		Store: store,
		Subject: func(ctx context.Context) (string, error) {
			user, _ := ctx.Value(userKey{}).(string)
			return user, nil
		},
		Settings: idempotency.Settings{Observer: otelidem.New(otelidem.WithTracerProvider(tp))},
	})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(authenticate, idem))
	srv.RegisterService(&counterService, &counter{})
	lis, err := net.Listen("tcp", ":50051")
	if err != nil {
		log.Fatal(err)
	}
	log.Fatal(srv.Serve(lis))
}
