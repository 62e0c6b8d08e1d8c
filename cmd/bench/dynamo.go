package main

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// DynamoDBResult is what the DynamoDB store asks of DynamoDB, measured on
// moto's server: requests per path, counted on the wire; capacity per
// path, as the server reports it and as DynamoDB's sizing rules give it
// from the items' sizes; what a replay costs as the stored response grows;
// and the decorator's own time around this store (the emulator's latency
// itself says nothing of DynamoDB's and is not reported).
type DynamoDBResult struct {
	// Server names the emulator.
	Server string `json:"server"`
	// Paths are the decorator's paths, each over Ops operations.
	Paths []DynamoPath `json:"paths"`
	// Sizes are replays and first requests of growing responses.
	Sizes []DynamoSize `json:"sizes"`
	// Sides are the decorator's own time on a replay and on a first
	// request, one client: each operation's time through idempotency.Wrap
	// less the time spent inside the store's calls, so that the emulator's
	// latency, and its noise, drop out.
	Sides []Side `json:"sides"`
}

// DynamoPath is one path's requests and capacity, per operation.
type DynamoPath struct {
	Name string `json:"name"`
	Ops  int    `json:"ops"`
	// Requests counts the HTTP requests sent, by DynamoDB operation.
	Requests      map[string]float64 `json:"requests_per_op"`
	RequestsPerOp float64            `json:"total_requests_per_op"`
	// ReportedUnits is the ConsumedCapacity the server returned (asked for
	// with ReturnConsumedCapacity TOTAL), summed per operation; Unreported
	// counts the requests that returned none (a failed conditional write).
	ReportedUnits float64 `json:"reported_units_per_op"`
	Unreported    float64 `json:"unreported_requests_per_op"`
	// WriteUnits and ReadUnits are DynamoDB's sizing rules applied to the
	// items (dynamostore.ItemSize): a write, a failed conditional write
	// included, one unit per KB of the larger of the items before and
	// after, at least one; a strongly consistent read one per 4 KB.
	WriteUnits float64 `json:"write_units_per_op"`
	ReadUnits  float64 `json:"read_units_per_op"`
	// ItemBytes is the completed record's size.
	ItemBytes int `json:"item_bytes"`
}

// DynamoSize is a replay and a first request of a response body of
// BodyBytes.
type DynamoSize struct {
	BodyBytes int `json:"body_bytes"`
	ItemBytes int `json:"item_bytes"`
	// ReplayWRU is a replay's failed conditional PutItem by DynamoDB's
	// rule; ReadRRU a strongly consistent GetItem of the same item, the
	// alternative the store does not take.
	ReplayWRU int     `json:"replay_wru"`
	ReadRRU   float64 `json:"read_rru"`
	// FirstWRU is the claim's PutItem and the completion's UpdateItem.
	FirstWRU int `json:"first_wru"`
}

// wireCounter counts the requests an SDK client sends, by operation.
type wireCounter struct {
	base *http.Client
	mu   sync.Mutex
	ops  map[string]int
}

func (w *wireCounter) Do(req *http.Request) (*http.Response, error) {
	op := req.Header.Get("X-Amz-Target")
	if i := strings.IndexByte(op, '.'); i >= 0 {
		op = op[i+1:]
	}
	w.mu.Lock()
	w.ops[op]++
	w.mu.Unlock()
	return w.base.Do(req)
}

func (w *wireCounter) take() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	ops := w.ops
	w.ops = map[string]int{}
	return ops
}

// capacityMeter asks every write and read for its consumed capacity and
// sums what comes back.
type capacityMeter struct {
	mu         sync.Mutex
	units      float64
	unreported int
}

// take returns the units reported and the number of requests that
// reported none since the last call.
func (m *capacityMeter) take() (float64, int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	u, n := m.units, m.unreported
	m.units, m.unreported = 0, 0
	return u, n
}

// register adds the meter to a client's middleware stack.
func (m *capacityMeter) register(stack *middleware.Stack) error {
	return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("BenchConsumedCapacity",
		func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
			switch p := in.Parameters.(type) {
			case *dynamodb.PutItemInput:
				p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
			case *dynamodb.UpdateItemInput:
				p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
			case *dynamodb.DeleteItemInput:
				p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
			case *dynamodb.GetItemInput:
				p.ReturnConsumedCapacity = types.ReturnConsumedCapacityTotal
			}
			out, md, err := next.HandleInitialize(ctx, in)
			var cc *types.ConsumedCapacity
			switch r := out.Result.(type) {
			case *dynamodb.PutItemOutput:
				cc = r.ConsumedCapacity
			case *dynamodb.UpdateItemOutput:
				cc = r.ConsumedCapacity
			case *dynamodb.DeleteItemOutput:
				cc = r.ConsumedCapacity
			case *dynamodb.GetItemOutput:
				cc = r.ConsumedCapacity
			}
			m.mu.Lock()
			if cc != nil {
				m.units += aws.ToFloat64(cc.CapacityUnits)
			} else {
				m.unreported++
			}
			m.mu.Unlock()
			return out, md, err
		}), middleware.After)
}

// writeUnits is DynamoDB's write units for items of these sizes: one per
// KB of the largest, rounded up, at least one.
func writeUnits(sizes ...int) int {
	return max(1, (max(0, slicesMax(sizes))+1023)/1024)
}

// readUnits is a strongly consistent read of an item of size bytes: one
// unit per 4 KB, rounded up.
func readUnits(size int) float64 { return float64(max(1, (size+4095)/4096)) }

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func (b *bench) dynamoDB(ctx context.Context) error {
	srv, err := dynamotest.Start(ctx)
	if err != nil {
		b.res.Notes = append(b.res.Notes, "DynamoDB was not measured: "+err.Error())
		return nil
	}
	defer srv.Stop()
	res := &DynamoDBResult{Server: motoVersion()}
	b.res.DynamoDB = res

	wire := &wireCounter{base: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}, ops: map[string]int{}}
	meter := &capacityMeter{}
	client := dynamodb.New(dynamodb.Options{
		Region:           dynamotest.Region,
		BaseEndpoint:     aws.String(srv.Endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("test", "test", ""),
		RetryMaxAttempts: 1,
		HTTPClient:       wire,
		APIOptions:       []func(*middleware.Stack) error{meter.register},
	})
	store, err := dynamostore.New(client, &dynamostore.Options{Table: "bench"})
	if err != nil {
		return err
	}
	if _, err := client.CreateTable(ctx, store.CreateTableInput()); err != nil {
		return fmt.Errorf("creating the table: %w", err)
	}
	wire.take()
	_, _ = meter.take()
	n := 200
	if b.cfg.quick {
		n = 40
	}
	h, err := b.wrap(noop, store)
	if err != nil {
		return err
	}
	item := func(user, key string) (map[string]types.AttributeValue, error) {
		out, err := client.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("bench"), Key: store.Key(user, key), ConsistentRead: aws.Bool(true)})
		if err != nil {
			return nil, err
		}
		return out.Item, nil
	}
	// measure runs op n times and records its path; sizes gives the
	// DynamoDB units of one operation.
	measure := func(name string, op func(i int) error, units func() (write, read float64, itemBytes int, err error)) error {
		wire.take()
		_, _ = meter.take()
		for i := range n {
			if err := op(i); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		ops := wire.take()
		reported, unreported := meter.take()
		w, r, itemBytes, err := units()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		p := DynamoPath{Name: name, Ops: n, Requests: map[string]float64{}, ReportedUnits: reported / float64(n),
			Unreported: float64(unreported) / float64(n), WriteUnits: w, ReadUnits: r, ItemBytes: itemBytes}
		for op, c := range ops {
			p.Requests[op] = float64(c) / float64(n)
			p.RequestsPerOp += float64(c) / float64(n)
		}
		res.Paths = append(res.Paths, p)
		log.Printf("  dynamodb %-22s %.2f requests/op %v, reported %.2f units/op, DynamoDB's rule %.0f WRU + %.0f RRU", name, p.RequestsPerOp, p.Requests, p.ReportedUnits, w, r)
		return nil
	}

	user := uuid.NewString()
	var lastKey string
	// The sizes of the in-progress and the completed item of one key,
	// measured once.
	var inProgressBytes, completedBytes int
	firstUnits := func() (float64, float64, int, error) {
		done, err := item(user, lastKey)
		if err != nil {
			return 0, 0, 0, err
		}
		completedBytes = dynamostore.ItemSize(done)
		// The in-progress item of the same key: the completed one without
		// the response, with its lease.
		probe := uuid.NewString()
		now := time.Now()
		if _, err := store.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: probe, Owner: uuid.NewString()}, Fingerprint: strings.Repeat("0", 64), Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(idempotency.DefaultTTL)}); err != nil {
			return 0, 0, 0, err
		}
		open, err := item(user, probe)
		if err != nil {
			return 0, 0, 0, err
		}
		inProgressBytes = dynamostore.ItemSize(open)
		return float64(writeUnits(inProgressBytes) + writeUnits(inProgressBytes, completedBytes)), 0, completedBytes, nil
	}
	if err := measure("first request", func(int) error {
		lastKey = uuid.NewString()
		_, err := call(ctx, h, postEvent("/noop", user, lastKey, taskBody), false)
		return err
	}, firstUnits); err != nil {
		return err
	}

	replayEv := postEvent("/noop", user, lastKey, taskBody)
	replayUnits := func() (float64, float64, int, error) {
		return float64(writeUnits(completedBytes, inProgressBytes)), 0, completedBytes, nil
	}
	if err := measure("replay", func(int) error { _, err := call(ctx, h, replayEv, true); return err }, replayUnits); err != nil {
		return err
	}

	// A duplicate while the first still runs: a claim of a key held in
	// progress by another owner.
	heldKey := uuid.NewString()
	now := time.Now()
	held := idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: heldKey, Owner: uuid.NewString()}, Fingerprint: requestHash, Now: now, LeaseUntil: now.Add(time.Hour), ExpiresAt: now.Add(idempotency.DefaultTTL)}
	if _, err := store.Claim(ctx, held); err != nil {
		return err
	}
	if err := measure("duplicate in progress", func(int) error {
		c := held
		c.Owner, c.Now = uuid.NewString(), time.Now()
		r, err := store.Claim(ctx, c)
		if err == nil && r.Claimed {
			err = fmt.Errorf("a held key was claimed")
		}
		return err
	}, func() (float64, float64, int, error) {
		return float64(writeUnits(inProgressBytes)), 0, inProgressBytes, nil
	}); err != nil {
		return err
	}

	// A takeover of a record whose lease ran out an hour ago.
	var staleKeys []string
	for range n {
		k := uuid.NewString()
		past := time.Now().Add(-2 * time.Hour)
		if _, err := store.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: k, Owner: uuid.NewString()}, Fingerprint: requestHash, Now: past, LeaseUntil: past.Add(time.Minute), ExpiresAt: past.Add(idempotency.DefaultTTL)}); err != nil {
			return err
		}
		staleKeys = append(staleKeys, k)
	}
	if err := measure("takeover", func(i int) error {
		now := time.Now()
		r, err := store.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: user, Key: staleKeys[i], Owner: uuid.NewString()}, Fingerprint: requestHash, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(idempotency.DefaultTTL)})
		if err == nil && !r.Claimed {
			err = fmt.Errorf("a stale record was not taken over")
		}
		return err
	}, func() (float64, float64, int, error) {
		return float64(writeUnits(inProgressBytes) + writeUnits(inProgressBytes)), 0, inProgressBytes, nil
	}); err != nil {
		return err
	}

	// What a replay costs as the stored response grows.
	for _, size := range []int{1 << 10, 16 << 10, 128 << 10, 350 << 10} {
		key := uuid.NewString()
		ref := idemstore.Ref{UserID: user, Key: key, Owner: uuid.NewString()}
		now := time.Now()
		if _, err := store.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: requestHash, Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(idempotency.DefaultTTL)}); err != nil {
			return err
		}
		resp := idemstore.Response{StatusCode: 200, Headers: map[string]string{"Content-Type": "application/json"}, Body: strings.Repeat("x", size)}
		if err := store.Complete(ctx, idemstore.Completion{Ref: ref, Response: resp, Now: now, ExpiresAt: now.Add(idempotency.DefaultTTL)}); err != nil {
			return fmt.Errorf("completing a %d-byte response: %w", size, err)
		}
		it, err := item(user, key)
		if err != nil {
			return err
		}
		bytes := dynamostore.ItemSize(it)
		res.Sizes = append(res.Sizes, DynamoSize{BodyBytes: size, ItemBytes: bytes, ReplayWRU: writeUnits(bytes, inProgressBytes),
			ReadRRU: readUnits(bytes), FirstWRU: writeUnits(inProgressBytes) + writeUnits(inProgressBytes, bytes)})
	}

	// The decorator's own time: each operation's time less the time inside
	// the store's calls.
	timing := &timingStore{Store: store}
	dec, err := b.decoratorSides(ctx, timing)
	if err != nil {
		return err
	}
	for i := range dec {
		full := dec[i].op
		dec[i].name = "decorator's own time, " + dec[i].name
		dec[i].op = func(ctx context.Context, w int) (time.Duration, error) {
			timing.take()
			d, err := full(ctx, w)
			return d - timing.take(), err
		}
	}
	p := plan{reps: b.cfg.reps, clients: 1, dur: b.cfg.floorDur, maxOps: b.cfg.maxOps, warm: b.cfg.warm}
	if res.Sides, err = compare(ctx, p, dec); err != nil {
		return err
	}
	logSides("dynamodb", res.Sides)
	return nil
}

// timingStore sums the time spent inside a store's calls, for one client
// at a time.
type timingStore struct {
	idemstore.Store
	mu     sync.Mutex
	inside time.Duration
}

func (s *timingStore) add(start time.Time) {
	d := time.Since(start)
	s.mu.Lock()
	s.inside += d
	s.mu.Unlock()
}

// take returns the time spent inside the store since the last call.
func (s *timingStore) take() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.inside
	s.inside = 0
	return d
}

func (s *timingStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	defer s.add(time.Now())
	return s.Store.Claim(ctx, c)
}

func (s *timingStore) Complete(ctx context.Context, c idemstore.Completion) error {
	defer s.add(time.Now())
	return s.Store.Complete(ctx, c)
}

func (s *timingStore) Release(ctx context.Context, r idemstore.Ref) error {
	defer s.add(time.Now())
	return s.Store.Release(ctx, r)
}

func (s *timingStore) Renew(ctx context.Context, r idemstore.Renewal) error {
	defer s.add(time.Now())
	return s.Store.Renew(ctx, r)
}

// motoVersion names the emulator the bench ran on.
func motoVersion() string {
	if v, err := dynamotest.Version(); err == nil {
		return "moto " + v + " (moto_server)"
	}
	return "moto (moto_server, version unknown)"
}
