package connectidem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/connectidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// TestDeadlineCauseIsLeaseLost: a procedure still running when its call's
// deadline passes is cancelled with a cause that wraps ErrLeaseLost, on
// each protocol.
func TestDeadlineCauseIsLeaseLost(t *testing.T) {
	t.Parallel()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			causes := make(chan error, 1)
			h := serve(t, p, connectidem.Config{Store: memstore.New()}, func(ctx context.Context, _ int32, _ *wrapperspb.StringValue) (*structpb.Struct, error) {
				<-ctx.Done()
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			})
			client := connect.NewClient[wrapperspb.StringValue, structpb.Struct](h.client, h.url+createProcedure, h.opts...)
			req := connect.NewRequest(wrapperspb.String("slow"))
			req.Header().Set(userHeader, "alice")
			req.Header().Set(idempotency.HeaderName, uuid.NewString())
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, err := client.CallUnary(ctx, req)
			require.Equal(t, connect.CodeDeadlineExceeded, connect.CodeOf(err), "%v", err)
			cause := <-causes
			require.True(t, errors.Is(cause, idemstore.ErrLeaseLost), "the cause: %v", cause)
		})
	}
}
