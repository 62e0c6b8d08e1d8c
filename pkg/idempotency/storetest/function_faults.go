package storetest

import (
	"context"
	"math"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/internal/runctx"
)

// functionFaultCases are function and batch answers once found wrong. Work ran
// again after its result could not be kept. Done messages failed after a
// payload check was added. A store that is not the run's took a completion.
var functionFaultCases = []functionCase{
	{"a result that does not encode completes the key, and a repeat does not run again", func(t *testing.T, e *funcEnv) {
		cfg := config(e, orderID)
		f, err := idempotency.Function(func(ctx context.Context, o order) (float64, error) {
			e.ran(o.ID)
			return math.NaN(), nil // the work is done; its result cannot be JSON
		}, cfg)
		require.NoError(t, err)
		o := order{ID: uuid.NewString()}
		first, err := f(context.Background(), o)
		require.NoError(t, err, "the caller gets the work's result")
		require.True(t, math.IsNaN(first))
		for range 2 {
			_, err = f(context.Background(), o)
			require.ErrorIs(t, err, idempotency.ErrResultNotKept)
		}
		require.EqualValues(t, 1, e.runsOf(o.ID), "the work never runs twice")
		require.Zero(t, e.store.releases.Load(), "the record is not released")
		var outcomes []string
		for _, line := range jsonLines(t, e.logs) {
			outcomes = append(outcomes, line["outcome"].(string))
		}
		require.Equal(t, []string{"not_kept", "replayed", "replayed"}, outcomes)
	}},
	{"sqs: a record kept without a result is skipped as done", func(t *testing.T, e *funcEnv) {
		// The store refuses the result as too large: the engine keeps the
		// key completed with the not-kept marker, once, without retrying.
		e.store.tooLarge.Store(true)
		m := sqsMessage(`{"n":1}`)
		h := e.batchHandler(nil)
		resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		require.EqualValues(t, 2, e.store.completes.Load(), "the refused completion, then the marker; no retry of what cannot succeed")
		e.store.tooLarge.Store(false)
		for range 2 {
			resp, err = h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{m}})
			require.NoError(t, err)
			require.Empty(t, resp.BatchItemFailures, "the redelivery is skipped as done")
		}
		require.EqualValues(t, 1, e.runsOf(m.MessageId), "the work never runs twice")
	}},
	{"sqs: adding a payload check does not fail messages done before it", func(t *testing.T, e *funcEnv) {
		done := sqsMessage(`{"event_id":"e-1"}`)
		before := e.batchHandler(nil)
		resp, err := before(context.Background(), events.SQSEvent{Records: []events.SQSMessage{done}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)

		// The next deployment checks the body: the redelivery of the
		// message done before is skipped, not failed with ErrKeyReused.
		after := e.batchHandler(nil, func(c *idempotency.FunctionConfig[events.SQSMessage]) { c.Payload = idempotency.SQSBody })
		resp, err = after(context.Background(), events.SQSEvent{Records: []events.SQSMessage{done}})
		require.NoError(t, err)
		require.Empty(t, failedIDs(resp), "a record made without a payload check is no evidence of a mismatch")
		require.EqualValues(t, 1, e.runsOf(done.MessageId))

		// Records made with the check are still compared.
		checked := sqsMessage(`{"event_id":"e-2"}`)
		resp, err = after(context.Background(), events.SQSEvent{Records: []events.SQSMessage{checked}})
		require.NoError(t, err, "logs: %s", e.logs.String())
		require.Empty(t, resp.BatchItemFailures)
		changed := checked
		changed.Body = `{"event_id":"e-2","kind":"other"}`
		resp, err = after(context.Background(), events.SQSEvent{Records: []events.SQSMessage{changed}})
		require.ErrorIs(t, err, idempotency.ErrBatchFailed)
		require.Equal(t, []string{changed.MessageId}, failedIDs(resp))
		require.EqualValues(t, 1, e.runsOf(checked.MessageId))
	}},
	{"a completion taken by another store than the run's is refused, and the engine completes", func(t *testing.T, e *funcEnv) {
		// Only the run's own store may write its completion in the caller's
		// transaction: a store that wraps it (as the case's store wraps the
		// real one) is refused, nothing is handed out, and the engine
		// completes the record itself.
		var takeErr error
		var taken, found bool
		f := e.newOrder(func(ctx context.Context, o order) error {
			var run runctx.Run
			if run, found = runctx.From(ctx); found {
				_, taken, takeErr = run.TakeCompletion(struct{}{}, receipt{OrderID: o.ID})
			}
			return nil
		})
		o := order{ID: uuid.NewString()}
		first, err := f(context.Background(), o)
		require.NoError(t, err)
		require.True(t, found, "the run is in the function's context")
		require.Error(t, takeErr)
		require.False(t, taken)
		again, err := f(context.Background(), o)
		require.NoError(t, err, "the key completed: a repeat replays instead of ErrInProgress")
		require.Equal(t, first.Run, again.Run)
		require.EqualValues(t, 1, e.runsOf(o.ID))
		_, found = runctx.From(context.Background())
		require.False(t, found, "outside a run there is nothing to take over")
	}},
}
