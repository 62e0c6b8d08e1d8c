package grpcidem_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/ichido/ichido/pkg/idempotency/grpcidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
)

// TestDeadlineCauseIsLeaseLost: a method still running when its call's
// deadline passes is cancelled with a cause that wraps ErrLeaseLost, as
// the documentation says, whichever of the client's reset and the
// server's timer comes first.
func TestDeadlineCauseIsLeaseLost(t *testing.T) {
	t.Parallel()
	causes := make(chan error, 1)
	h := serve(t, grpcidem.Config{Store: memstore.New()}, func(ctx context.Context, _ int32, _ *wrapperspb.StringValue) (*structpb.Struct, error) {
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	md := metadata.Pairs(userHeader, "alice", grpcidem.MetadataKey, uuid.NewString())
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(context.Background(), md), 300*time.Millisecond)
	defer cancel()
	err := h.conn.Invoke(ctx, createMethod, wrapperspb.String("slow"), new(structpb.Struct))
	require.Equal(t, codes.DeadlineExceeded, status.Code(err), "%v", err)
	cause := <-causes
	require.True(t, errors.Is(cause, idemstore.ErrLeaseLost), "the cause: %v", cause)
}
