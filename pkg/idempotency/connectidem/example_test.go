package connectidem_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// userKey is where authenticate keeps the caller it verified.
type userKey struct{}

// authenticate stands for real authentication middleware: it verifies the
// caller's credentials and puts the subject into the request's context.
func authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer alice-token" {
			r = r.WithContext(context.WithValue(r.Context(), userKey{}, "alice"))
		}
		next.ServeHTTP(w, r)
	})
}

func Example() {
	idem, err := connectidem.NewInterceptor(connectidem.Config{
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
	// A procedure that answers how many times it ran; generated code
	// (NewCounterServiceHandler) takes the same option.
	runs := int64(0)
	next := func(_ context.Context, _ *connect.Request[wrapperspb.StringValue]) (*connect.Response[wrapperspb.Int64Value], error) {
		runs++
		return connect.NewResponse(wrapperspb.Int64(runs)), nil
	}
	mux := http.NewServeMux()
	mux.Handle("/example.Counter/Next", connect.NewUnaryHandler("/example.Counter/Next", next, connect.WithInterceptors(idem)))
	srv := httptest.NewServer(authenticate(mux))
	defer srv.Close()

	client := connect.NewClient[wrapperspb.StringValue, wrapperspb.Int64Value](srv.Client(), srv.URL+"/example.Counter/Next")
	call := func(key, note string) {
		req := connect.NewRequest(wrapperspb.String(note))
		req.Header().Set("Authorization", "Bearer alice-token")
		req.Header().Set(idempotency.HeaderName, key)
		res, err := client.CallUnary(context.Background(), req)
		if err != nil {
			fmt.Println(connect.CodeOf(err))
			return
		}
		fmt.Printf("%d replayed=%t\n", res.Msg.GetValue(), res.Header().Get(idempotency.ReplayedHeader) == "true")
	}
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "first")
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "first")     // a retry: replayed
	call("8e03978e-40d5-43e8-bc93-6894a57f9324", "different") // the key reused
	call("3f2b7c1e-9a4d-4e5f-8b6a-1c2d3e4f5a6b", "second")
	// Output:
	// 1 replayed=false
	// 1 replayed=true
	// failed_precondition
	// 2 replayed=false
}
