package idempotency_test

import (
	"context"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// recorder is an Observer that keeps what the engine tells it.
type recorder struct {
	mu    sync.Mutex
	next  int
	calls []observe.Call
	spans []*recSpan
}

type recSpan struct {
	id     string
	stores []string
	result observe.Result
	ended  int
}

func (r *recorder) Start(ctx context.Context, c observe.Call) (context.Context, observe.Span) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.next++
	s := &recSpan{id: string(rune('a'+r.next)) + "000000000000000"}
	r.calls = append(r.calls, c)
	r.spans = append(r.spans, s)
	return ctx, s
}

func (s *recSpan) Origin() *idemstore.Origin {
	return &idemstore.Origin{TraceID: "0af7651916cd43dd8448eb211c80319c", SpanID: s.id}
}
func (s *recSpan) StoreCall(op string, _ time.Time, _ time.Duration, class string) {
	s.stores = append(s.stores, op+":"+class)
}
func (s *recSpan) End(r observe.Result) { s.result = r; s.ended++ }

// TestObserverSeesEveryCallAndItsOrigin: with an Observer, every protected
// call is one span that sees its store calls and its result once; the run
// that completes a record leaves its span's ids in the store, and a replay
// made by another process (a new decorator on the same store: a cold
// start) is told which run produced its answer.
func TestObserverSeesEveryCallAndItsOrigin(t *testing.T) {
	store := memstore.New()
	first, later := &recorder{}, &recorder{}
	wrap := func(o observe.Observer) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		h, err := idempotency.Wrap(countingCreate(new(int)), quiet(idempotency.Config{Store: store, Settings: idempotency.Settings{Observer: o}}))
		require.NoError(t, err)
		return h
	}
	req := v2Post("/tasks", "auth0|x", map[string]string{"idempotency-key": "8e03978e-40d5-43e8-bc93-6894a57f9324"}, `{}`)
	resp, err := wrap(first)(context.Background(), req)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, resp.StatusCode)
	again, err := wrap(later)(context.Background(), req)
	require.NoError(t, err)

	require.Equal(t, []observe.Call{{Shape: observe.ShapeHTTP, Method: http.MethodPost, Store: "memstore"}}, first.calls)
	run := first.spans[0]
	require.Equal(t, 1, run.ended)
	require.Equal(t, []string{"claim:", "complete:"}, run.stores)
	require.Equal(t, observe.Result{Outcome: "completed", Status: http.StatusCreated, Claimed: true}, run.result, "a run shorter than a renewal period was never renewed")

	replay := later.spans[0]
	require.Equal(t, 1, replay.ended)
	require.True(t, replay.result.Replayed)
	require.Equal(t, "replayed", replay.result.Outcome)
	require.NotNil(t, replay.result.Origin, "the replay learns its origin from the store")
	require.Equal(t, run.id, replay.result.Origin.SpanID)
	require.False(t, replay.result.Origin.At.IsZero())
	// Nothing of the origin reaches the client: the replay is the first
	// answer and its marker, and no more.
	require.Equal(t, resp.Body, again.Body)
	want := maps.Clone(resp.Headers)
	want[idempotency.ReplayedHeader] = "true"
	require.Equal(t, want, again.Headers)
}
