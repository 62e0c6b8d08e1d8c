package history

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

var soak = flag.Bool("soak", false, "run the long histories (make soak-history)")

// The timing of every call: the lease of a claim ends margin after the
// call's deadline, and every worker's clock is within skewBound of the
// machine's. A pause is longer than a lease, so that the paused worker's
// leases run out while it is stopped.
const (
	deadline  = 800 * time.Millisecond
	margin    = 400 * time.Millisecond
	skewBound = 100 * time.Millisecond
	slow      = 300 * time.Millisecond
	pause     = deadline + margin + 400*time.Millisecond
	cutChance = 0.05
	keyWindow = 500 * time.Millisecond
	keysShort = 16
	keysSoak  = 64
)

// Heartbeat runs: calls with no deadline, whose lease is one heartbeat,
// renewed every heartbeat/3. The engine tells such a run (cancels its
// context) when no renewal has succeeded for heartbeat less
// min(margin, heartbeat/3), which must cover the clocks' disagreement, 2 ×
// skewBound: heartbeat/3 = 300 ms. A beat run's handler makes its side
// effect in beatSteps steps, beatStep apart (several beats in all),
// checking its context before each; every worker calls the key of each
// beatWindow, again every beatRetry until it has run or replayed, so that
// another worker's retry takes a key over once its lease has run out. A
// renewal starts an outage of its worker's renewals with probability
// outageChance, for longer than a lease.
const (
	heartbeat    = 900 * time.Millisecond
	beatSteps    = 8
	beatStep     = 200 * time.Millisecond
	beatWindow   = 2 * time.Second
	beatRetry    = 100 * time.Millisecond
	outage       = heartbeat * 3 / 2
	outageChance = 0.5
)

// clockTolerance is how far apart two runs' execution intervals may be
// misjudged. The intervals are read on the wall clock (time.Now's wall
// reading, Unix nanoseconds): every process of the machine reads the one
// system clock, so readings of different processes order as the events
// did, unless the clock is stepped; Go's monotonic reading is counted from
// each process's start and cannot be compared across processes, and a
// collector would time an event when it arrives, not when it happened. A
// step is caught instead: each worker logs both readings at its start and
// end, and the check fails when they drift apart by more than this.
const clockTolerance = 2 * time.Millisecond

// The environment through which TestHistory talks to its workers.
const (
	envStore = "ICHIDO_HISTORY_STORE"
	envAddr  = "ICHIDO_HISTORY_ADDR"
	envLog   = "ICHIDO_HISTORY_LOG"
	envSeed  = "ICHIDO_HISTORY_SEED"
	envSkew  = "ICHIDO_HISTORY_SKEW"
	envUntil = "ICHIDO_HISTORY_UNTIL"
	envKeys  = "ICHIDO_HISTORY_KEYS"
	envName  = "ICHIDO_HISTORY_NAME"
	envProc  = "ICHIDO_HISTORY_PROC"
	envConc  = "ICHIDO_HISTORY_GOROUTINES"
	envStart = "ICHIDO_HISTORY_START"
	envTable = "ICHIDO_HISTORY_TABLE"
	// envBroken, when set, has the workers use leaseIgnoringStore.
	envBroken = "ICHIDO_HISTORY_BROKEN"
)

// leaseIgnoringStore is a broken store, for the test that shows that the
// check can fail: a claim that finds the record in progress for the same
// request counts as claimed, as if the lease did not exist.
type leaseIgnoringStore struct{ idemstore.Store }

func (s leaseIgnoringStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && !res.Claimed && res.Record.Status == idemstore.StatusInProgress && res.Record.Fingerprint == c.Fingerprint {
		res.Claimed = true
	}
	return res, err
}

// event is one line of a process's log.
type event struct {
	E        string `json:"e"` // call, claimed, effect, handled, returned, renew, outage, clock, cuts
	ID       string `json:"id,omitempty"`
	Key      string `json:"key,omitempty"`
	Body     string `json:"body,omitempty"`
	Owner    string `json:"owner,omitempty"`
	T        int64  `json:"t"`
	Deadline int64  `json:"deadline,omitempty"`
	Beat     bool   `json:"beat,omitempty"`  // a call with no deadline
	Lease    int64  `json:"lease,omitempty"` // a beat call's first lease (a lower bound), a renewal's
	Sent     int64  `json:"sent,omitempty"`  // when a renewal was sent
	Mono     int64  `json:"mono,omitempty"`  // a clock event: the process's monotonic time
	OK       bool   `json:"ok,omitempty"`
	Out      string `json:"out,omitempty"`
	Finish   string `json:"finish,omitempty"`
	N        int    `json:"n,omitempty"`
}

// eventLog writes events to a file, one write per event, so that a process
// killed at any moment leaves every event it wrote.
type eventLog struct {
	mu sync.Mutex
	f  *os.File
}

func (l *eventLog) write(e event) {
	if e.T == 0 {
		e.T = time.Now().UnixNano()
	}
	b, _ := json.Marshal(e)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.f.Write(append(b, '\n'))
}

// input is the Function's input; Outcome is what its handler does.
type input struct {
	Key     string
	Body    string
	Outcome string // ok, error, panic, slow, beat (a long run with no deadline)
}

// output is the Function's result: the run that produced it.
type output struct {
	Owner string
	Body  string
}

type ownerKey struct{}

// call is one call in flight, reached through its context.
type call struct {
	id, owner string
	deadline  time.Time
	finish    string // the engine's outcome, from its log line
}

// outcomeHandler takes the engine's outcome of each call from its log line.
type outcomeHandler struct{}

func (outcomeHandler) Enabled(context.Context, slog.Level) bool { return true }
func (outcomeHandler) WithAttrs([]slog.Attr) slog.Handler       { return outcomeHandler{} }
func (outcomeHandler) WithGroup(string) slog.Handler            { return outcomeHandler{} }
func (outcomeHandler) Handle(ctx context.Context, r slog.Record) error {
	c, ok := ctx.Value(ownerKey{}).(*call)
	if !ok {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "outcome" {
			c.finish = a.Value.String()
		}
		return true
	})
	return nil
}

var errHandler = errors.New("the handler failed")

// renewalFaults makes a worker's renewals fail for a while, as when the
// store cannot be reached: a renewal starts an outage with probability
// outageChance; during one, each renewal is lost before the store acts (at
// once, or after hanging until its context ends; two outages in five each)
// or its reply is lost after the store acted (one in five), one kind per
// outage. Every renewal is logged, with what the store did.
type renewalFaults struct {
	idemstore.Store
	log *eventLog

	mu    sync.Mutex
	rng   *rand.Rand
	until time.Time // the current outage's end
	kind  int       // 0 lost at once, 1 lost after hanging, 2 reply lost
}

func (s *renewalFaults) Renew(ctx context.Context, r idemstore.Renewal) error {
	var id string
	if c, ok := ctx.Value(ownerKey{}).(*call); ok {
		id = c.id
	}
	s.mu.Lock()
	if now := time.Now(); !now.Before(s.until) && s.rng.Float64() < outageChance {
		s.until, s.kind = now.Add(outage), []int{0, 0, 1, 1, 2}[s.rng.IntN(5)]
		s.log.write(event{E: "outage", N: s.kind})
	}
	down, kind := time.Now().Before(s.until), s.kind
	s.mu.Unlock()
	sent := time.Now().UnixNano()
	lost := &idemstore.Error{Op: "renew", Err: errors.New("the store cannot be reached (a renewal outage)")}
	if down && kind < 2 {
		if kind == 1 {
			<-ctx.Done()
		}
		s.log.write(event{E: "renew", ID: id, Owner: r.Owner, Sent: sent, Out: "dropped"})
		return lost
	}
	err := s.Store.Renew(ctx, r)
	out := "renewed"
	switch {
	case errors.Is(err, idemstore.ErrLeaseLost):
		out = "lease_lost"
	case err != nil:
		out = outUnknown
	}
	s.log.write(event{E: "renew", ID: id, Owner: r.Owner, Sent: sent, Lease: r.LeaseUntil.UnixNano(), Out: out})
	if down {
		return lost
	}
	return err
}

// newFunction returns the idempotent Function every process calls, logging
// to log, on store, with its clock skewed by skew.
func newFunction(t testing.TB, name string, store idemstore.Store, log *eventLog, skew time.Duration, proc int) func(context.Context, input) (output, error) {
	handler := func(ctx context.Context, in input) (output, error) {
		c := ctx.Value(ownerKey{}).(*call)
		log.write(event{E: "claimed", ID: c.id})
		if in.Outcome == "beat" {
			// The handler's side of the contract: it stops, making no more
			// side effects, as soon as its context is cancelled.
			for step := range beatSteps {
				select {
				case <-ctx.Done():
				case <-time.After(beatStep):
				}
				if ctx.Err() != nil {
					log.write(event{E: "handled", ID: c.id})
					return output{}, context.Cause(ctx)
				}
				log.write(event{E: "effect", ID: c.id, Key: in.Key, Owner: c.owner, N: step})
			}
			log.write(event{E: "handled", ID: c.id, OK: true})
			return output{Owner: c.owner, Body: in.Body}, nil
		}
		switch in.Outcome {
		case "error":
			log.write(event{E: "handled", ID: c.id})
			return output{}, errHandler
		case "panic":
			log.write(event{E: "handled", ID: c.id})
			panic("the handler panicked")
		case "slow":
			select {
			case <-ctx.Done():
				log.write(event{E: "handled", ID: c.id})
				return output{}, ctx.Err()
			case <-time.After(slow):
			}
		}
		if !time.Now().Before(c.deadline) {
			// Past its deadline a Lambda function is no longer running.
			log.write(event{E: "handled", ID: c.id})
			return output{}, context.DeadlineExceeded
		}
		log.write(event{E: "effect", ID: c.id, Key: in.Key, Owner: c.owner})
		log.write(event{E: "handled", ID: c.id, OK: true})
		return output{Owner: c.owner, Body: in.Body}, nil
	}
	cfg := idempotency.FunctionConfig[input]{
		Store:   store,
		Name:    name,
		Key:     func(_ context.Context, in input) (string, error) { return in.Key, nil },
		Payload: func(in input) ([]byte, error) { return []byte(in.Body), nil },
		Settings: idempotency.Settings{
			LeaseMargin: margin,
			Heartbeat:   heartbeat,
			Owner:       func(ctx context.Context) string { return ctx.Value(ownerKey{}).(*call).owner },
			Clock:       func() time.Time { return time.Now().Add(skew) },
			Logger:      slog.New(outcomeHandler{}),
			Metrics:     io.Discard,
		},
	}
	if proc%2 == 1 {
		cfg.LocalCache = &idempotency.LocalCache{}
	}
	if proc%3 == 2 {
		cfg.WaitForResult = 200 * time.Millisecond
	}
	fn, err := idempotency.Function(handler, cfg)
	require.NoError(t, err)
	return fn
}

// callOnce makes one call, from a process whose clock is skewed by skew,
// logs it, and returns its answer. A beat call has no deadline.
func callOnce(fn func(context.Context, input) (output, error), log *eventLog, id string, in input, skew time.Duration) string {
	c := &call{id: id, owner: uuid.NewString()}
	ctx := context.WithValue(context.Background(), ownerKey{}, c)
	e := event{E: "call", ID: id, Key: in.Key, Body: in.Body, Owner: c.owner}
	if in.Outcome == "beat" {
		// The engine reads its clock for the claim after this.
		e.Beat, e.Lease = true, time.Now().Add(skew+heartbeat).UnixNano()
	} else {
		c.deadline = time.Now().Add(deadline)
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, c.deadline)
		defer cancel()
		e.Deadline = c.deadline.UnixNano()
	}
	log.write(e)
	out, err, panicked := func() (out output, err error, panicked bool) {
		defer func() {
			if recover() != nil {
				panicked = true
			}
		}()
		out, err = fn(ctx, in)
		return out, err, false
	}()
	var se *idemstore.Error
	var answer string
	switch {
	case panicked:
		answer = "panic"
	case err == nil && out.Owner == c.owner:
		answer = "ran"
	case err == nil && out.Body != in.Body:
		answer = "wrong-body:" + out.Owner
	case err == nil:
		answer = replayPrefix + out.Owner
	case errors.Is(err, idempotency.ErrInProgress):
		answer = outBusy
	case errors.Is(err, idempotency.ErrKeyReused):
		answer = outMismatch
	case errors.Is(err, idemstore.ErrLeaseLost) || errors.Is(err, context.Canceled):
		answer = "error" // a beat run that was told
	case errors.As(err, &se):
		answer = outUnavailable
	case errors.Is(err, errHandler) || errors.Is(err, context.DeadlineExceeded):
		answer = "error"
	default:
		answer = "other: " + err.Error()
	}
	log.write(event{E: "returned", ID: id, Out: answer, Finish: c.finish})
	return answer
}

// TestHistoryWorker is a worker process of TestHistory; run on its own it
// does nothing.
func TestHistoryWorker(t *testing.T) {
	kind := os.Getenv(envStore)
	if kind == "" {
		t.Skip("a worker of TestHistory")
	}
	atoi := func(name string) int64 {
		n, err := strconv.ParseInt(os.Getenv(name), 10, 64)
		require.NoError(t, err, name)
		return n
	}
	f, err := os.OpenFile(os.Getenv(envLog), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	require.NoError(t, err)
	defer f.Close()
	log := &eventLog{f: f}
	proc := int(atoi(envProc))
	rng := rand.New(rand.NewPCG(uint64(atoi(envSeed)), uint64(proc)))
	began := time.Now()
	logClock := func() {
		now := time.Now() // one reading: its wall and monotonic parts
		log.write(event{E: "clock", T: now.UnixNano(), Mono: int64(now.Sub(began))})
	}
	logClock()

	var store idemstore.Store
	var cutter *storetest.ReplyCutter
	switch kind {
	case "postgres":
		u, err := url.Parse(os.Getenv(envAddr))
		require.NoError(t, err)
		cutter = storetest.NewReplyCutter(t, u.Host)
		u.Host = cutter.Addr()
		cfg, err := pgxpool.ParseConfig(u.String())
		require.NoError(t, err)
		cfg.MaxConns = 4
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		defer pool.Close()
		store = must.Value(pgstore.New(pool, nil))
	case "redis", "valkey":
		cutter = storetest.NewReplyCutter(t, os.Getenv(envAddr))
		c := redis.NewClient(&redis.Options{Addr: cutter.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		store = must.Value(redisstore.New(c, nil))
	case "dynamodb":
		cutter = storetest.NewReplyCutter(t, os.Getenv(envAddr))
		client := dynamotest.NewClientAt("http://"+cutter.Addr(), dynamotest.ClientOptions{MaxAttempts: 1})
		st, err := dynamostore.New(client, &dynamostore.Options{Table: os.Getenv(envTable)})
		require.NoError(t, err)
		store = st
	default:
		t.Fatalf("unknown store %q", kind)
	}
	if os.Getenv(envBroken) != "" {
		store = leaseIgnoringStore{store}
	}
	faults := &renewalFaults{Store: store, log: log, rng: rand.New(rand.NewPCG(uint64(atoi(envSeed)), uint64(proc)+1<<32))}
	name := os.Getenv(envName)
	skew := time.Duration(atoi(envSkew))
	fn := newFunction(t, name, faults, log, skew, proc)
	until := time.Unix(0, atoi(envUntil))
	start := time.Unix(0, atoi(envStart))
	keys := int(atoi(envKeys))

	var mu sync.Mutex
	var wg sync.WaitGroup
	for g := range int(atoi(envConc)) {
		wg.Go(func() {
			for n := 0; time.Now().Before(until); n++ {
				mu.Lock()
				// The keys in use move on every keyWindow, half of them at a
				// time, so that new keys keep being claimed while older ones
				// are replayed.
				window := int(time.Since(start) / keyWindow)
				in := input{Key: fmt.Sprintf("key-%d", window*keys/2+rng.IntN(keys)), Body: fmt.Sprintf("body-%d", rng.IntN(2))}
				switch p := rng.Float64(); {
				case p < 0.6:
					in.Outcome = "ok"
				case p < 0.75:
					in.Outcome = "error"
				case p < 0.85:
					in.Outcome = "panic"
				default:
					in.Outcome = "slow"
				}
				cut := rng.Float64() < cutChance
				pauseMS := rng.IntN(50)
				mu.Unlock()
				if cut {
					// The reply to the next request that names this key (a
					// claim, completion or release, of this call or another)
					// is lost after the store acted.
					_, recordKey, _ := idempotency.FunctionRecordID("", name, "", in.Key)
					cutter.CutReplyTo(recordKey)
				}
				callOnce(fn, log, fmt.Sprintf("p%d-g%d-%d", proc, g, n), in, skew)
				time.Sleep(time.Duration(pauseMS) * time.Millisecond)
			}
		})
	}
	// The heartbeat runs: one goroutine calls the key of each beatWindow,
	// with no deadline, until it has run or replayed; every worker does, so
	// that a run whose renewals fail is raced by another worker's retry.
	wg.Go(func() {
		for n := 0; time.Now().Add(beatSteps * beatStep).Before(until); n++ {
			window := time.Since(start) / beatWindow
			in := input{Key: fmt.Sprintf("beat-%d", window), Body: "body-0", Outcome: "beat"}
			answer := callOnce(fn, log, fmt.Sprintf("p%d-beat-%d", proc, n), in, skew)
			if answer == "ran" || strings.HasPrefix(answer, replayPrefix) {
				time.Sleep(time.Until(start.Add((window + 1) * beatWindow)))
				continue
			}
			time.Sleep(beatRetry)
		}
	})
	wg.Wait()
	logClock()
	log.write(event{E: "cuts", N: cutter.Cuts()})
}

// storeUnderTest is one store the histories run on.
type storeUnderTest struct {
	kind  string
	addr  string // what a worker connects to (through its own proxy)
	table string // DynamoDB's table
	open  func(t *testing.T) idemstore.Store
}

// TestHistory runs the histories on PostgreSQL, Redis 7.0, Valkey 8.1 and
// DynamoDB (moto's server).
func TestHistory(t *testing.T) {
	if os.Getenv(envStore) != "" {
		t.Skip("a worker process")
	}
	stores := []func(t *testing.T) storeUnderTest{
		func(t *testing.T) storeUnderTest {
			db := apptest.New(t)
			return storeUnderTest{kind: "postgres", addr: db.URL, open: func(t *testing.T) idemstore.Store { return must.Value(pgstore.New(db.Pool, nil)) }}
		},
		func(t *testing.T) storeUnderTest {
			srv := redistest.StartT(t)
			return storeUnderTest{kind: "redis", addr: srv.Addr, open: func(t *testing.T) idemstore.Store {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = c.Close() })
				return must.Value(redisstore.New(c, nil))
			}}
		},
		// Valkey 8.1, where a completion is one SET … IFEQ instead of the
		// script.
		func(t *testing.T) storeUnderTest {
			srv, err := redistest.StartValkey(context.Background())
			require.NoError(t, err)
			t.Cleanup(srv.Stop)
			return storeUnderTest{kind: "valkey", addr: srv.Addr, open: func(t *testing.T) idemstore.Store {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = c.Close() })
				return must.Value(redisstore.New(c, nil))
			}}
		},
		func(t *testing.T) storeUnderTest {
			srv := dynamotest.StartT(t)
			client := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
			st, err := dynamostore.New(client, &dynamostore.Options{Table: dynamotest.TableName(t)})
			require.NoError(t, err)
			dynamotest.CreateTable(t, client, st.CreateTableInput())
			return storeUnderTest{kind: "dynamodb", addr: srv.Addr(), table: st.Table(), open: func(t *testing.T) idemstore.Store { return st }}
		},
	}
	for _, newStore := range stores {
		st := newStore(t)
		t.Run(st.kind, func(t *testing.T) { runHistory(t, st) })
	}
}

// runHistory runs one history on st and checks it.
func runHistory(t *testing.T, st storeUnderTest) {
	size := historySize{workers: 3, goroutines: 6, keys: keysShort, length: 6 * time.Second}
	if *soak {
		size = historySize{workers: 4, goroutines: 8, keys: keysSoak, length: 60 * time.Second}
	}
	res := recordHistory(t, st, size, false)
	require.Empty(t, res.violations, "violations of the contract")
	require.Empty(t, res.overlaps, "runs of one key that executed at the same time")
	require.Equal(t, porcupine.Ok, res.linearizable, "the history is not linearizable against the contract's model; the operations of the failing key:\n%s", res.illegal)
}

// TestHistoryCatchesBrokenStore shows that the check can fail: over a
// store whose claims ignore the lease, the history is found not
// linearizable (or the side effects not exactly once).
func TestHistoryCatchesBrokenStore(t *testing.T) {
	if os.Getenv(envStore) != "" {
		t.Skip("a worker process")
	}
	srv := redistest.StartT(t)
	st := storeUnderTest{kind: "redis", addr: srv.Addr, open: func(t *testing.T) idemstore.Store {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { _ = c.Close() })
		return must.Value(redisstore.New(c, nil))
	}}
	// A history is random, and what this store breaks shows only when two
	// calls of one request meet while the first runs; a short history on a
	// loaded machine may draw none. Up to four are recorded until one is
	// caught; the check fails when none is.
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		res := recordHistory(t, st, historySize{workers: 2, goroutines: 6, keys: 4, length: 2 * time.Second}, true)
		if res.linearizable != porcupine.Ok || len(res.violations) > 0 || len(res.overlaps) > 0 {
			t.Logf("caught in history %d: linearizable %s, %d violations, %d overlaps; the failing key:\n%s", attempt, res.linearizable, len(res.violations), len(res.overlaps), res.illegal)
			return
		}
		t.Logf("history %d: nothing caught in %d calls, %d runs", attempt, res.calls, res.runs)
	}
	require.Fail(t, "a store that ignores leases went unnoticed", "in %d histories", attempts)
}

// historySize is how much one history does.
type historySize struct {
	workers, goroutines, keys int
	length                    time.Duration
}

// recordHistory runs one history on st (with leaseIgnoringStore in the
// workers when broken) and checks it.
func recordHistory(t *testing.T, st storeUnderTest, size historySize, broken bool) result {
	workers, goroutines, keys, length := size.workers, size.goroutines, size.keys, size.length
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	dir := t.TempDir()
	name := "history-" + uuid.NewString()
	start := time.Now()
	until := start.Add(length)

	type worker struct {
		cmd  *exec.Cmd
		proc int
		log  string
		skew time.Duration
		done chan error
	}
	var procs []*worker
	startWorker := func(proc int) *worker {
		w := &worker{proc: proc, log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", proc)), done: make(chan error, 1)}
		w.skew = time.Duration(rng.Int64N(int64(2*skewBound+1))) - skewBound
		w.cmd = exec.Command(os.Args[0], "-test.run=^TestHistoryWorker$", "-test.count=1")
		w.cmd.Env = os.Environ()
		if broken {
			w.cmd.Env = append(w.cmd.Env, envBroken+"=1")
		}
		w.cmd.Env = append(w.cmd.Env,
			envStore+"="+st.kind, envAddr+"="+st.addr, envTable+"="+st.table, envLog+"="+w.log,
			envSeed+"="+strconv.FormatInt(seed, 10), envSkew+"="+strconv.FormatInt(int64(w.skew), 10),
			envUntil+"="+strconv.FormatInt(until.UnixNano(), 10), envStart+"="+strconv.FormatInt(start.UnixNano(), 10), envKeys+"="+strconv.Itoa(keys),
			envName+"="+name, envProc+"="+strconv.Itoa(proc), envConc+"="+strconv.Itoa(goroutines))
		out := &lockedBuffer{}
		w.cmd.Stdout, w.cmd.Stderr = out, out
		require.NoError(t, w.cmd.Start())
		go func() {
			err := w.cmd.Wait()
			if err != nil {
				err = fmt.Errorf("%w: %s", err, out.String())
			}
			w.done <- err
		}()
		procs = append(procs, w)
		return w
	}
	for i := range workers {
		startWorker(i)
	}

	// The faults the parent injects, one after another: pauses longer than
	// a lease, and every third fault a kill (with a new worker in its
	// place).
	pauses, kills := 0, 0
	var paused []pauseSpan
	killed := map[*worker]bool{}
	gap := min(length/8, 2*time.Second)
	for i, at := 0, start.Add(gap); at.Add(pause).Before(until.Add(-length / 10)); i++ {
		time.Sleep(time.Until(at))
		var live []*worker
		for _, w := range procs {
			if !killed[w] {
				live = append(live, w)
			}
		}
		w := live[rng.IntN(len(live))]
		if i%3 == 1 {
			require.NoError(t, w.cmd.Process.Signal(syscall.SIGKILL))
			killed[w] = true
			kills++
			startWorker(len(procs))
			at = time.Now().Add(gap)
			continue
		}
		from := time.Now().UnixNano()
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(pause)
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGCONT))
		paused = append(paused, pauseSpan{proc: fmt.Sprintf("p%d-", w.proc), from: from, to: time.Now().UnixNano()})
		pauses++
		at = time.Now().Add(gap)
	}
	for _, w := range procs {
		err := <-w.done
		if !killed[w] {
			require.NoError(t, err, "a worker failed")
		}
	}

	// The last round, with no faults: every key with each body, so that the
	// final state of every key is in the history.
	f, err := os.Create(filepath.Join(dir, "final.log"))
	require.NoError(t, err)
	final := &eventLog{f: f}
	fn := newFunction(t, name, st.open(t), final, 0, 0)
	time.Sleep(deadline + margin + skewBound) // every lease of the run has ended
	var logs, skews []string
	for _, w := range procs {
		logs = append(logs, w.log)
		skews = append(skews, w.skew.Round(time.Millisecond).String())
	}
	h, err := readHistory(logs)
	require.NoError(t, err)
	used := map[string]bool{}
	for _, c := range h.calls {
		if c.call != nil {
			used[c.call.Key] = true
		}
	}
	keysUsed := make([]string, 0, len(used))
	for k := range used {
		keysUsed = append(keysUsed, k)
	}
	sort.Strings(keysUsed)
	for k, key := range keysUsed {
		for b := range 2 {
			callOnce(fn, final, fmt.Sprintf("final-%d-%d", k, b), input{Key: key, Body: fmt.Sprintf("body-%d", b), Outcome: "ok"}, 0)
		}
	}
	require.NoError(t, f.Close())
	h, err = readHistory(append(logs, f.Name()))
	require.NoError(t, err)
	res := check(h, paused)
	t.Logf("%s: %d processes (%d goroutines each and one of heartbeat runs, clocks skewed %v), %d keys at a time, %v: %d calls (%d runs, %d of them heartbeat runs; %d side effects), %d operations checked (%d renewals); faults: %d lost replies, %d renewal outages of %v (%d renewals lost), %d pauses of %v, %d kills; %d keys completed, each by exactly one run; %d side effects of runs that did not complete their key; %d runs checked for overlap, %d overlaps excused (the run's process was paused while it ran), %d overlaps",
		st.kind, len(procs), goroutines, skews, keys, length.Round(time.Second), res.calls, res.runs, res.beatRuns, res.effects, res.operations, res.renewals, h.cuts, h.outages, outage, res.renewalsLost, pauses, pause, kills, res.completedKeys, res.lostLeaseEffects, res.spans, res.excused, len(res.overlaps))
	if !broken {
		writeFigures(t, st.kind, fmt.Sprintf("%d worker processes at a time (%d in all) × %d goroutines and 1 of heartbeat runs, %d keys at a time, %v", workers, len(procs), goroutines, keys, length.Round(time.Second)), res, h, pauses, kills)
	}
	return res
}

// history is what the processes' logs hold, by call.
type history struct {
	calls    map[string]*callEvents
	renewals []event
	clocks   map[string][]event // by log: a worker's clock events
	cuts     int
	outages  int
}

type callEvents struct {
	call, claimed, handled, returned *event
	effects                          []event
}

func readHistory(paths []string) (*history, error) {
	h := &history{calls: map[string]*callEvents{}, clocks: map[string][]event{}}
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, err
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var e event
			if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
				continue // a line cut short by a kill
			}
			switch e.E {
			case "cuts":
				h.cuts += e.N
				continue
			case "outage":
				h.outages++
				continue
			case "renew":
				h.renewals = append(h.renewals, e)
				continue
			case "clock":
				h.clocks[p] = append(h.clocks[p], e)
				continue
			}
			c := h.calls[e.ID]
			if c == nil {
				c = &callEvents{}
				h.calls[e.ID] = c
			}
			switch e.E {
			case "call":
				c.call = &e
			case "claimed":
				c.claimed = &e
			case "handled":
				c.handled = &e
			case "returned":
				c.returned = &e
			case "effect":
				c.effects = append(c.effects, e)
			}
		}
		f.Close()
		if err := sc.Err(); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// pauseSpan is a pause of a worker process (SIGSTOP to SIGCONT, wall
// clock); proc is the prefix of its calls' ids.
type pauseSpan struct {
	proc     string
	from, to int64
}

// span is the execution interval of one run, on the wall clock.
type span struct {
	id       string
	beat     bool
	from, to int64
}

// result is what check found.
type result struct {
	calls, runs, beatRuns, effects  int
	operations, renewals            int
	renewalsLost                    int
	completedKeys, lostLeaseEffects int
	spans, excused                  int
	violations, overlaps            []string
	linearizable                    porcupine.CheckResult
	illegal                         string
}

// check builds the operations of h, checks them with porcupine against the
// contract's model, counts the side effects per completed key, and checks
// that no two runs of a key executed at once (paused: the workers' pauses).
func check(h *history, paused []pauseSpan) result {
	var res result
	var ops []porcupine.Operation
	ids := make([]string, 0, len(h.calls))
	for id := range h.calls {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	effects := map[string]map[string]int{}   // key → owner → side effects
	finishes := map[string]map[string]bool{} // key → owners whose run completed the key
	final := map[string]map[string]bool{}    // key → owners of the final round's answers
	beats := map[string]bool{}               // owners of beat calls
	spans := map[string][]span{}             // key → its runs' execution intervals
	for client, id := range ids {
		c := h.calls[id]
		if c.call == nil {
			continue
		}
		res.calls++
		key, owner := c.call.Key, c.call.Owner
		ret := int64(math.MaxInt64)
		if c.returned != nil {
			ret = c.returned.T
		}
		lease := c.call.Deadline + int64(margin)
		if c.call.Beat {
			lease = c.call.Lease
			beats[owner] = true
		}
		base := opInput{Key: key, Owner: owner, Body: c.call.Body, Lease: lease}
		for range c.effects {
			if effects[key] == nil {
				effects[key] = map[string]int{}
			}
			effects[key][owner]++
			res.effects++
		}
		if c.claimed != nil {
			res.runs++
			if c.call.Beat {
				res.beatRuns++
			}
			spans[key] = append(spans[key], runSpan(id, c))
			claim := base
			claim.Op, claim.Returned = opClaim, c.claimed.T
			ops = append(ops, porcupine.Operation{ClientId: client, Input: claim, Call: c.call.T, Output: outClaimed, Return: c.claimed.T})
			fin := base
			fin.Op, fin.Returned = opFinish, ret
			from := c.claimed.T
			if c.handled != nil {
				fin.Known, fin.Complete, from = true, c.handled.OK, c.handled.T
			}
			out := outUnknown
			if c.returned != nil {
				out = c.returned.Finish
				if out == "completed" {
					if finishes[key] == nil {
						finishes[key] = map[string]bool{}
					}
					finishes[key][owner] = true
				}
			}
			ops = append(ops, porcupine.Operation{ClientId: client, Input: fin, Call: from, Output: out, Return: ret})
		} else {
			req := base
			req.Op, req.Returned = opRequest, ret
			out := outUnknown
			if c.returned != nil {
				out = c.returned.Out
				switch {
				case out == outBusy || out == outMismatch || out == outUnavailable || len(out) > len(replayPrefix) && out[:len(replayPrefix)] == replayPrefix:
				default:
					res.violations = append(res.violations, fmt.Sprintf("call %s (key %s) did not run and answered %q", id, key, out))
				}
			}
			ops = append(ops, porcupine.Operation{ClientId: client, Input: req, Call: c.call.T, Output: out, Return: ret})
		}
		if c.returned != nil && len(id) > 6 && id[:6] == "final-" {
			r := c.returned.Out
			if r == "ran" {
				r = replayPrefix + owner
			}
			if len(r) > len(replayPrefix) && r[:len(replayPrefix)] == replayPrefix {
				if final[key] == nil {
					final[key] = map[string]bool{}
				}
				final[key][r[len(replayPrefix):]] = true
			}
		}
		if c.returned != nil && len(c.returned.Out) > 11 && c.returned.Out[:11] == "wrong-body:" {
			res.violations = append(res.violations, fmt.Sprintf("call %s (key %s) got the result of another payload", id, key))
		}
	}
	// The renewals that reached the store (a lost request changed nothing).
	for _, e := range h.renewals {
		c := h.calls[e.ID]
		if c == nil || c.call == nil {
			continue
		}
		if e.Out == "dropped" {
			res.renewalsLost++
			continue
		}
		res.renewals++
		in := opInput{Op: opRenew, Key: c.call.Key, Owner: e.Owner, Lease: e.Lease, Returned: e.T}
		ops = append(ops, porcupine.Operation{ClientId: len(ids) + res.renewals, Input: in, Call: e.Sent, Output: e.Out, Return: e.T})
	}
	res.operations = len(ops)

	// The wall clock was not stepped while the workers ran.
	for path, clocks := range h.clocks {
		if len(clocks) < 2 {
			continue // a killed worker
		}
		first, last := clocks[0], clocks[len(clocks)-1]
		if d := time.Duration((last.T - first.T) - (last.Mono - first.Mono)); d.Abs() > clockTolerance {
			res.violations = append(res.violations, fmt.Sprintf("%s: the wall clock moved %v against the monotonic clock: the execution intervals cannot be compared", filepath.Base(path), d))
		}
	}

	// At most one run of a key executes at any time: each run's interval
	// ends before the next one's starts. A run in a process that was paused
	// while it ran is excused: a frozen process can neither be told nor
	// keep time.
	for key, runs := range spans {
		sort.Slice(runs, func(i, j int) bool { return runs[i].from < runs[j].from })
		res.spans += len(runs)
		for j, b := range runs {
			for _, a := range runs[:j] {
				if b.from >= a.to-int64(clockTolerance) {
					continue
				}
				if pausedDuring(paused, a) {
					res.excused++
					continue
				}
				res.overlaps = append(res.overlaps, fmt.Sprintf("key %s: run %s (%s) executed until %s, after run %s (%s) started at %s",
					key, a.id, kindOf(a), wall(a.to), b.id, kindOf(b), wall(b.from)))
			}
		}
	}

	// Exactly once: each key completed by exactly one run, whose side
	// effect happened once; any other side effect of the key is a run that
	// lost its lease (its finish was not a completion).
	for key, owners := range final {
		if len(owners) != 1 {
			res.violations = append(res.violations, fmt.Sprintf("key %s answered the final round with %d different results", key, len(owners)))
			continue
		}
		res.completedKeys++
		var winner string
		for o := range owners {
			winner = o
		}
		want := 1
		if beats[winner] {
			want = beatSteps
		}
		if n := effects[key][winner]; n != want {
			res.violations = append(res.violations, fmt.Sprintf("key %s: the completing run's side effect happened %d times (%d steps)", key, n, want))
		}
		for o := range finishes[key] {
			if o != winner {
				res.violations = append(res.violations, fmt.Sprintf("key %s was completed by two runs (%s and %s)", key, short(winner), short(o)))
			}
		}
		for o, n := range effects[key] {
			if o != winner {
				res.lostLeaseEffects += n
			}
		}
	}

	model := contractModel(int64(skewBound))
	check, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	res.linearizable = check
	if check == porcupine.Illegal {
		res.illegal = describeIllegal(model, ops, info)
	}
	return res
}

// runSpan is run c's execution interval: from its handler's start to its
// return, or to its last event when its process was killed. A run with a
// deadline makes no side effect past it (Lambda would have stopped it), so
// its interval ends there, unless a side effect came later.
func runSpan(id string, c *callEvents) span {
	sp := span{id: id, beat: c.call.Beat, from: c.claimed.T, to: c.claimed.T}
	if c.handled != nil {
		sp.to = c.handled.T
	}
	var last int64
	for _, e := range c.effects {
		last = max(last, e.T)
	}
	if c.handled == nil {
		sp.to = max(sp.to, last)
	}
	if !sp.beat {
		sp.to = max(min(sp.to, c.call.Deadline), last, sp.from)
	}
	return sp
}

// pausedDuring reports whether the process of run s was paused while s ran.
func pausedDuring(paused []pauseSpan, s span) bool {
	for _, p := range paused {
		if strings.HasPrefix(s.id, p.proc) && p.from < s.to && p.to > s.from {
			return true
		}
	}
	return false
}

func kindOf(s span) string {
	if s.beat {
		return "no deadline, heartbeat"
	}
	return "deadline"
}

func wall(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000") }

// describeIllegal lists the operations of the first key whose history is
// not linearizable, in call order.
func describeIllegal(model porcupine.Model, ops []porcupine.Operation, _ porcupine.LinearizationInfo) string {
	for _, part := range model.Partition(ops) {
		if porcupine.CheckOperations(model, part) {
			continue
		}
		sort.Slice(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		var b []byte
		t0 := part[0].Call
		for i, op := range part {
			if i == 80 {
				b = fmt.Appendf(b, "  … %d more\n", len(part)-i)
				break
			}
			end := "∞"
			if op.Return != math.MaxInt64 {
				end = fmt.Sprintf("%.3fs", float64(op.Return-t0)/1e9)
			}
			b = fmt.Appendf(b, "  [%.3fs, %s] %s\n", float64(op.Call-t0)/1e9, end, model.DescribeOperation(op.Input, op.Output))
		}
		return string(b)
	}
	return "(no single key fails on its own)"
}

// writeFigures appends this history's figures to the file named by
// ICHIDO_HISTORY_FIGURES, when set (make soak-history).
func writeFigures(t *testing.T, store, size string, res result, h *history, pauses, kills int) {
	path := os.Getenv("ICHIDO_HISTORY_FIGURES")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	verdict := "0 violations, 0 overlaps"
	if len(res.violations) > 0 || len(res.overlaps) > 0 || res.linearizable != porcupine.Ok {
		verdict = fmt.Sprintf("%d violations, %d overlaps, linearizable: %s", len(res.violations), len(res.overlaps), res.linearizable)
	}
	_, err = fmt.Fprintf(f, "| %s | %s | %d | %d (%d heartbeat) | %d (%d renewals) | %d lost replies, %d renewal outages (%d renewals lost), %d pauses of %v, %d kills | %d (%d side effects of runs that did not complete their key) | %d runs, %d overlaps excused by a pause | %s |\n",
		store, size, res.calls, res.runs, res.beatRuns, res.operations, res.renewals, h.cuts, h.outages, res.renewalsLost, pauses, pause, kills, res.completedKeys, res.lostLeaseEffects, res.spans, res.excused, verdict)
	require.NoError(t, err)
}

// lockedBuffer collects a worker's output.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b = append(l.b, p...)
	return len(p), nil
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return string(l.b)
}
