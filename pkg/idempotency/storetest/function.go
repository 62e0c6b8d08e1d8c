package storetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// runFunction runs the behaviour table of idempotency.Function and
// idempotency.SQSHandler against the Store that newStore returns (called
// once; the cases share the Store and run in parallel, each under a
// function name of its own).
func runFunction(t *testing.T, newStore func(t *testing.T) idemstore.Store) {
	t.Helper()
	store := newStore(t)
	for _, c := range slices.Concat(functionCases, functionFaultCases, cacheWaitHeartbeatFunctionCases, functionKeyCases) {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.run(t, newFuncEnv(t, store))
		})
	}
}

// funcEnv is one function case's world.
type funcEnv struct {
	t     *testing.T
	store *faultyStore
	clock *fakeClock
	logs  *logBuffer
	name  string
	runs  sync.Map // key -> *atomic.Int32
}

func newFuncEnv(t *testing.T, store idemstore.Store) *funcEnv {
	return &funcEnv{
		t:     t,
		store: &faultyStore{inner: store},
		clock: newFakeClock(),
		logs:  &logBuffer{},
		name:  "case-" + uuid.NewString(),
	}
}

// config is a FunctionConfig with the case's store, clock and name.
func config[In any](e *funcEnv, key func(context.Context, In) (string, error)) idempotency.FunctionConfig[In] {
	return idempotency.FunctionConfig[In]{
		Store: e.store,
		Name:  e.name,
		Key:   key,
		Settings: idempotency.Settings{
			Clock:   e.clock.Now,
			Logger:  slog.New(slog.NewJSONHandler(e.logs, nil)),
			Metrics: io.Discard,
		},
	}
}

// ran counts one run of the work for key and returns the count so far.
func (e *funcEnv) ran(key string) int32 {
	n, _ := e.runs.LoadOrStore(key, new(atomic.Int32))
	return n.(*atomic.Int32).Add(1)
}

func (e *funcEnv) runsOf(key string) int32 {
	n, ok := e.runs.Load(key)
	if !ok {
		return 0
	}
	return n.(*atomic.Int32).Load()
}

// order is the input of the functions in the table.
type order struct {
	ID    string `json:"id"`
	Items int    `json:"items"`
	Note  string `json:"note,omitempty"`
}

// receipt is their output.
type receipt struct {
	OrderID string    `json:"order_id"`
	Run     int32     `json:"run"`
	At      time.Time `json:"at"`
}

func orderID(_ context.Context, o order) (string, error) { return o.ID, nil }

// newOrder returns a function that answers a receipt naming its run, after
// calling during (when set) inside the run.
func (e *funcEnv) newOrder(during func(ctx context.Context, o order) error, mods ...func(*idempotency.FunctionConfig[order])) func(context.Context, order) (receipt, error) {
	e.t.Helper()
	cfg := config(e, orderID)
	for _, m := range mods {
		m(&cfg)
	}
	f, err := idempotency.Function(func(ctx context.Context, o order) (receipt, error) {
		n := e.ran(o.ID)
		if during != nil {
			if err := during(ctx, o); err != nil {
				return receipt{}, err
			}
		}
		return receipt{OrderID: o.ID, Run: n, At: e.clock.Now()}, nil
	}, cfg)
	require.NoError(e.t, err)
	return f
}

// sqsMessage is a standard queue's record.
func sqsMessage(body string) events.SQSMessage {
	return events.SQSMessage{
		MessageId:      uuid.NewString(),
		Body:           body,
		EventSource:    "aws:sqs",
		EventSourceARN: "arn:aws:sqs:eu-west-1:123456789012:task-events",
		Attributes:     map[string]string{"ApproximateReceiveCount": "1"},
	}
}

// fifoMessage is a FIFO queue's record in group.
func fifoMessage(group, body string) events.SQSMessage {
	m := sqsMessage(body)
	m.EventSourceARN = "arn:aws:sqs:eu-west-1:123456789012:task-events.fifo"
	m.Attributes["MessageGroupId"] = group
	return m
}

// failedIDs returns the message ids a batch response reports failed.
func failedIDs(resp events.SQSEventResponse) []string {
	ids := []string{}
	for _, f := range resp.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

// batchHandler returns an SQSHandler whose work counts its runs per message
// id and fails (or panics) when fail says so.
func (e *funcEnv) batchHandler(fail func(m events.SQSMessage) error, mods ...func(*idempotency.FunctionConfig[events.SQSMessage])) idempotency.SQSBatchHandler {
	e.t.Helper()
	cfg := config[events.SQSMessage](e, nil)
	for _, m := range mods {
		m(&cfg)
	}
	h, err := idempotency.SQSHandler(func(ctx context.Context, m events.SQSMessage) error {
		e.ran(m.MessageId)
		if fail != nil {
			return fail(m)
		}
		return nil
	}, cfg)
	require.NoError(e.t, err)
	return h
}

// quickFinish bounds the retries of a completion that keeps failing.
func quickFinish(c *idempotency.FunctionConfig[order]) { c.FinishTimeout = 200 * time.Millisecond }

type functionCase struct {
	name string
	run  func(t *testing.T, e *funcEnv)
}

var errWork = errors.New("the work failed")

var functionCases = []functionCase{
	{"a repeat gets the stored result without running", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil)
		o := order{ID: uuid.NewString(), Items: 3}
		first, err := f(context.Background(), o)
		require.NoError(t, err)
		e.clock.Advance(time.Minute)
		again, err := f(context.Background(), o)
		require.NoError(t, err)
		require.Equal(t, first.OrderID, again.OrderID)
		require.EqualValues(t, 1, again.Run)
		require.True(t, first.At.Equal(again.At), "the stored result, not a new one")
		require.EqualValues(t, 1, e.runsOf(o.ID))
		require.Equal(t, 1, int(e.store.completes.Load()))
	}},
	{"an error releases the key and a retry runs again", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(func(ctx context.Context, o order) error {
			if e.runsOf(o.ID) == 1 {
				return errWork
			}
			return nil
		})
		o := order{ID: uuid.NewString()}
		_, err := f(context.Background(), o)
		require.ErrorIs(t, err, errWork)
		r, err := f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Run)
		require.EqualValues(t, 1, e.store.releases.Load())
	}},
	{"a panic releases the key and goes on", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(func(ctx context.Context, o order) error {
			if e.runsOf(o.ID) == 1 {
				panic("the work panicked")
			}
			return nil
		})
		o := order{ID: uuid.NewString()}
		require.PanicsWithValue(t, "the work panicked", func() { _, _ = f(context.Background(), o) })
		r, err := f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Run)
	}},
	{"a repeat while the first runs fails with ErrInProgress", func(t *testing.T, e *funcEnv) {
		var inner error
		var f func(context.Context, order) (receipt, error)
		f = e.newOrder(func(ctx context.Context, o order) error {
			_, inner = f(context.WithoutCancel(context.Background()), o)
			return nil
		})
		o := order{ID: uuid.NewString()}
		_, err := f(context.Background(), o)
		require.NoError(t, err)
		require.ErrorIs(t, inner, idempotency.ErrInProgress)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"of concurrent calls with one key exactly one runs", func(t *testing.T, e *funcEnv) {
		const n = 8
		hold := make(chan struct{})
		f := e.newOrder(func(context.Context, order) error { <-hold; return nil })
		o := order{ID: uuid.NewString()}
		errs := make(chan error, n)
		for range n {
			go func() { _, err := f(context.Background(), o); errs <- err }()
		}
		var got []error
		for range n - 1 {
			got = append(got, <-errs)
		}
		close(hold)
		got = append(got, <-errs)
		inProgress := 0
		for _, err := range got {
			if errors.Is(err, idempotency.ErrInProgress) {
				inProgress++
			} else {
				require.NoError(t, err)
			}
		}
		require.Equal(t, n-1, inProgress)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"a failing store fails closed and the work does not run", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil)
		e.store.failClaim.Store(true)
		o := order{ID: uuid.NewString()}
		_, err := f(context.Background(), o)
		var se *idemstore.Error
		require.ErrorAs(t, err, &se)
		require.Equal(t, "claim", se.Op)
		require.Zero(t, e.runsOf(o.ID))
		e.store.failClaim.Store(false)
		_, err = f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"a failing completion returns the result and keeps the key until its lease ends", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, quickFinish)
		e.store.failComplete.Store(true)
		o := order{ID: uuid.NewString()}
		r, err := f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 1, r.Run)
		e.store.failComplete.Store(false)
		_, err = f(context.Background(), o)
		require.ErrorIs(t, err, idempotency.ErrInProgress)
		e.clock.Advance(idempotency.DefaultMaxLease + time.Second)
		r, err = f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Run)
	}},
	{"a repeat in the same Lambda invocation after a failed completion does not run again", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, quickFinish)
		ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: uuid.NewString()})
		o := order{ID: uuid.NewString()}
		e.store.failComplete.Store(true)
		_, err := f(ctx, o)
		require.NoError(t, err)
		e.store.failComplete.Store(false)
		// The same invocation (one SQS batch holding the event twice) meets
		// the record it left in progress: another call's, not its own.
		_, err = f(ctx, o)
		require.ErrorIs(t, err, idempotency.ErrInProgress)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"the caller's deadline bounds the lease", func(t *testing.T, e *funcEnv) {
		var during []error
		var f func(context.Context, order) (receipt, error)
		f = e.newOrder(func(ctx context.Context, o order) error {
			if e.runsOf(o.ID) == 1 {
				e.clock.Advance(11 * time.Second) // past the deadline, within the margin
				_, err := f(context.Background(), o)
				during = append(during, err)
				e.clock.Advance(2 * time.Second) // past deadline + margin
				_, err = f(context.Background(), o)
				during = append(during, err)
			}
			return nil
		})
		// The deadline is on the real clock, as Lambda's; the lease is
		// the time left until it, on the injected clock.
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(10*time.Second))
		defer cancel()
		o := order{ID: uuid.NewString()}
		_, err := f(ctx, o)
		require.NoError(t, err, "the first caller's own result comes back even when its lease was lost")
		require.ErrorIs(t, during[0], idempotency.ErrInProgress)
		require.NoError(t, during[1], "a lease past deadline + margin is taken over")
		require.EqualValues(t, 2, e.runsOf(o.ID))
		r, err := f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Run, "the record holds the result of the call that took over")
	}},
	{"a payload check refuses the same key with another payload", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil, func(c *idempotency.FunctionConfig[order]) {
			c.Payload = func(o order) ([]byte, error) {
				return []byte(fmt.Sprintf(`{"items": %d, "id": %q}`, o.Items, o.ID)), nil
			}
		})
		o := order{ID: uuid.NewString(), Items: 1}
		_, err := f(context.Background(), o)
		require.NoError(t, err)
		o.Note = "not in the payload"
		_, err = f(context.Background(), o)
		require.NoError(t, err)
		o.Items = 2
		_, err = f(context.Background(), o)
		require.ErrorIs(t, err, idempotency.ErrKeyReused)
		require.EqualValues(t, 1, e.runsOf(o.ID))
	}},
	{"scopes and names keep keys apart", func(t *testing.T, e *funcEnv) {
		scoped := func(c *idempotency.FunctionConfig[order]) {
			c.Scope = func(_ context.Context, o order) (string, error) { return o.Note, nil }
		}
		f := e.newOrder(nil, scoped)
		id := uuid.NewString()
		a, err := f(context.Background(), order{ID: id, Note: "tenant-a"})
		require.NoError(t, err)
		b, err := f(context.Background(), order{ID: id, Note: "tenant-b"})
		require.NoError(t, err)
		require.EqualValues(t, 1, a.Run)
		require.EqualValues(t, 2, b.Run)
		other := e.newOrder(nil, scoped, func(c *idempotency.FunctionConfig[order]) { c.Name += "-other" })
		c, err := other(context.Background(), order{ID: id, Note: "tenant-a"})
		require.NoError(t, err)
		require.EqualValues(t, 3, c.Run)
		again, err := f(context.Background(), order{ID: id, Note: "tenant-a"})
		require.NoError(t, err)
		require.EqualValues(t, 1, again.Run)
	}},
	{"an empty key fails before the store is asked", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil)
		_, err := f(context.Background(), order{})
		require.ErrorIs(t, err, idempotency.ErrNoKey)
		require.Zero(t, e.store.calls())
	}},
	{"DoNotStore makes a result not count", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(func(ctx context.Context, o order) error {
			if e.runsOf(o.ID) == 1 {
				require.True(t, idempotency.DoNotStore(ctx))
			}
			return nil
		})
		o := order{ID: uuid.NewString()}
		_, err := f(context.Background(), o)
		require.NoError(t, err)
		r, err := f(context.Background(), o)
		require.NoError(t, err)
		require.EqualValues(t, 2, r.Run)
	}},
	{"the log line names the function, key and outcome", func(t *testing.T, e *funcEnv) {
		f := e.newOrder(nil)
		o := order{ID: uuid.NewString()}
		for range 2 {
			_, err := f(context.Background(), o)
			require.NoError(t, err)
		}
		lines := jsonLines(t, e.logs)
		require.Len(t, lines, 2)
		require.Equal(t, e.name, lines[0]["function"])
		require.Equal(t, o.ID, lines[0]["key"])
		require.Equal(t, "completed", lines[0]["outcome"])
		require.Equal(t, "replayed", lines[1]["outcome"])
		require.NotContains(t, lines[0], "method")
	}},

	{"sqs: a failed record alone is retried and the redelivered batch runs every other record once", func(t *testing.T, e *funcEnv) {
		batch := events.SQSEvent{}
		for i := range 5 {
			batch.Records = append(batch.Records, sqsMessage(fmt.Sprintf(`{"n":%d}`, i)))
		}
		bad := batch.Records[2].MessageId
		h := e.batchHandler(func(m events.SQSMessage) error {
			if m.MessageId == bad && e.runsOf(bad) == 1 {
				return errWork
			}
			return nil
		})
		resp, err := h(context.Background(), batch)
		require.NoError(t, err)
		require.Equal(t, []string{bad}, failedIDs(resp))
		// SQS redelivers the failed record; a lost response or a timeout
		// redelivers the whole batch. Either way each record runs once more
		// at most: the failed one.
		resp, err = h(context.Background(), batch)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		for _, m := range batch.Records {
			want := int32(1)
			if m.MessageId == bad {
				want = 2
			}
			require.Equal(t, want, e.runsOf(m.MessageId), "message %s", m.MessageId)
		}
	}},
	{"sqs: a record in progress elsewhere is reported failed, not run twice", func(t *testing.T, e *funcEnv) {
		batch := events.SQSEvent{Records: []events.SQSMessage{sqsMessage(`{}`), sqsMessage(`{}`)}}
		var h idempotency.SQSBatchHandler
		var during events.SQSEventResponse
		h = e.batchHandler(func(m events.SQSMessage) error {
			if m.MessageId == batch.Records[0].MessageId && e.runsOf(m.MessageId) == 1 {
				// The same batch, delivered to a second invocation while this
				// record still runs.
				var err error
				during, err = h(context.Background(), batch)
				require.NoError(t, err)
			}
			return nil
		})
		resp, err := h(context.Background(), batch)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		require.Equal(t, []string{batch.Records[0].MessageId}, failedIDs(during))
		require.EqualValues(t, 1, e.runsOf(batch.Records[0].MessageId))
		require.EqualValues(t, 1, e.runsOf(batch.Records[1].MessageId))
	}},
	{"sqs: a key from the body catches a resend with a new message id", func(t *testing.T, e *funcEnv) {
		type taskEvent struct {
			EventID string `json:"event_id"`
		}
		h := e.batchHandler(nil, func(c *idempotency.FunctionConfig[events.SQSMessage]) {
			c.Key = idempotency.SQSBodyKey(func(ev taskEvent) string { return ev.EventID })
			c.Payload = idempotency.SQSBody
		})
		id := uuid.NewString()
		first := sqsMessage(`{"event_id":"` + id + `","kind":"created"}`)
		resend := sqsMessage(`{ "kind": "created", "event_id": "` + id + `" }`)
		other := sqsMessage(`{"event_id":"` + id + `","kind":"deleted"}`)
		broken := sqsMessage(`not json`)
		resp, err := h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{first, resend, other, broken}})
		require.NoError(t, err)
		require.Equal(t, []string{other.MessageId, broken.MessageId}, failedIDs(resp))
		require.EqualValues(t, 1, e.runsOf(first.MessageId))
		require.Zero(t, e.runsOf(resend.MessageId))
		require.Zero(t, e.runsOf(other.MessageId))
		require.Zero(t, e.runsOf(broken.MessageId))
	}},
	{"sqs: on a FIFO queue a failure stops its message group only", func(t *testing.T, e *funcEnv) {
		a1, b1, a2, b2, a3 := fifoMessage("a", "a1"), fifoMessage("b", "b1"), fifoMessage("a", "a2"), fifoMessage("b", "b2"), fifoMessage("a", "a3")
		h := e.batchHandler(func(m events.SQSMessage) error {
			if m.Body == "a2" && e.runsOf(m.MessageId) == 1 {
				return errWork
			}
			return nil
		})
		batch := events.SQSEvent{Records: []events.SQSMessage{a1, b1, a2, b2, a3}}
		resp, err := h(context.Background(), batch)
		require.NoError(t, err)
		require.Equal(t, []string{a2.MessageId, a3.MessageId}, failedIDs(resp))
		require.Zero(t, e.runsOf(a3.MessageId), "a later record of the failed group does not run")
		require.EqualValues(t, 1, e.runsOf(b2.MessageId), "another group goes on")
		resp, err = h(context.Background(), events.SQSEvent{Records: []events.SQSMessage{a2, a3}})
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		for _, m := range batch.Records {
			want := int32(1)
			if m.MessageId == a2.MessageId {
				want = 2
			}
			require.Equal(t, want, e.runsOf(m.MessageId), m.Body)
		}
	}},
	{"sqs: a store outage fails every record closed", func(t *testing.T, e *funcEnv) {
		h := e.batchHandler(nil)
		batch := events.SQSEvent{Records: []events.SQSMessage{sqsMessage("1"), sqsMessage("2")}}
		e.store.failClaim.Store(true)
		resp, err := h(context.Background(), batch)
		require.ErrorIs(t, err, idempotency.ErrBatchFailed)
		require.Equal(t, []string{batch.Records[0].MessageId, batch.Records[1].MessageId}, failedIDs(resp))
		require.Zero(t, e.runsOf(batch.Records[0].MessageId))
		e.store.failClaim.Store(false)
		resp, err = h(context.Background(), batch)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
	}},
	{"sqs: a panicking record fails alone", func(t *testing.T, e *funcEnv) {
		batch := events.SQSEvent{Records: []events.SQSMessage{sqsMessage("1"), sqsMessage("boom"), sqsMessage("3")}}
		h := e.batchHandler(func(m events.SQSMessage) error {
			if m.Body == "boom" && e.runsOf(m.MessageId) == 1 {
				panic("bad record")
			}
			return nil
		})
		resp, err := h(context.Background(), batch)
		require.NoError(t, err)
		require.Equal(t, []string{batch.Records[1].MessageId}, failedIDs(resp))
		resp, err = h(context.Background(), batch)
		require.NoError(t, err)
		require.Empty(t, resp.BatchItemFailures)
		require.EqualValues(t, 2, e.runsOf(batch.Records[1].MessageId))
		require.EqualValues(t, 1, e.runsOf(batch.Records[2].MessageId))
	}},
	{"sqs: records not started when the invocation ends are reported failed", func(t *testing.T, e *funcEnv) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		batch := events.SQSEvent{Records: []events.SQSMessage{sqsMessage("1"), sqsMessage("2"), sqsMessage("3")}}
		h := e.batchHandler(func(m events.SQSMessage) error {
			cancel() // the invocation runs out of time during the first record
			return nil
		})
		resp, err := h(ctx, batch)
		require.NoError(t, err)
		require.Equal(t, []string{batch.Records[1].MessageId, batch.Records[2].MessageId}, failedIDs(resp))
		require.Zero(t, e.runsOf(batch.Records[1].MessageId))
	}},
}
