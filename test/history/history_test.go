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
	E        string `json:"e"` // call, claimed, effect, handled, returned, cuts
	ID       string `json:"id,omitempty"`
	Key      string `json:"key,omitempty"`
	Body     string `json:"body,omitempty"`
	Owner    string `json:"owner,omitempty"`
	T        int64  `json:"t"`
	Deadline int64  `json:"deadline,omitempty"`
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
	Outcome string // ok, error, panic, slow
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

// newFunction returns the idempotent Function every process calls, logging
// to log, on store, with its clock skewed by skew.
func newFunction(t testing.TB, name string, store idemstore.Store, log *eventLog, skew time.Duration, proc int) func(context.Context, input) (output, error) {
	handler := func(ctx context.Context, in input) (output, error) {
		c := ctx.Value(ownerKey{}).(*call)
		log.write(event{E: "claimed", ID: c.id})
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

// callOnce makes one call and logs it.
func callOnce(fn func(context.Context, input) (output, error), log *eventLog, id string, in input) {
	c := &call{id: id, owner: uuid.NewString(), deadline: time.Now().Add(deadline)}
	ctx, cancel := context.WithDeadline(context.WithValue(context.Background(), ownerKey{}, c), c.deadline)
	defer cancel()
	log.write(event{E: "call", ID: id, Key: in.Key, Body: in.Body, Owner: c.owner, Deadline: c.deadline.UnixNano()})
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
	case errors.As(err, &se):
		answer = outUnavailable
	case errors.Is(err, errHandler) || errors.Is(err, context.DeadlineExceeded):
		answer = "error"
	default:
		answer = "other: " + err.Error()
	}
	log.write(event{E: "returned", ID: id, Out: answer, Finish: c.finish})
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
		store = pgstore.New(pool, nil)
	case "redis", "valkey":
		cutter = storetest.NewReplyCutter(t, os.Getenv(envAddr))
		c := redis.NewClient(&redis.Options{Addr: cutter.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		store = redisstore.New(c, nil)
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
	name := os.Getenv(envName)
	fn := newFunction(t, name, store, log, time.Duration(atoi(envSkew)), proc)
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
					_, recordKey := idempotency.FunctionRecordID("", name, "", in.Key)
					cutter.CutReplyTo(recordKey)
				}
				callOnce(fn, log, fmt.Sprintf("p%d-g%d-%d", proc, g, n), in)
				time.Sleep(time.Duration(pauseMS) * time.Millisecond)
			}
		})
	}
	wg.Wait()
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
			return storeUnderTest{kind: "postgres", addr: db.URL, open: func(t *testing.T) idemstore.Store { return pgstore.New(db.Pool, nil) }}
		},
		func(t *testing.T) storeUnderTest {
			srv := redistest.StartT(t)
			return storeUnderTest{kind: "redis", addr: srv.Addr, open: func(t *testing.T) idemstore.Store {
				c := redis.NewClient(&redis.Options{Addr: srv.Addr})
				t.Cleanup(func() { _ = c.Close() })
				return redisstore.New(c, nil)
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
				return redisstore.New(c, nil)
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
		return redisstore.New(c, nil)
	}}
	// A history is random, and what this store breaks shows only when two
	// calls of one request meet while the first runs; a short history on a
	// loaded machine may draw none. Up to four are recorded until one is
	// caught; the check fails when none is.
	const attempts = 4
	for attempt := 1; attempt <= attempts; attempt++ {
		res := recordHistory(t, st, historySize{workers: 2, goroutines: 6, keys: 4, length: 2 * time.Second}, true)
		if res.linearizable != porcupine.Ok || len(res.violations) > 0 {
			t.Logf("caught in history %d: linearizable %s, %d violations; the failing key:\n%s", attempt, res.linearizable, len(res.violations), res.illegal)
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
		log  string
		skew time.Duration
		done chan error
	}
	var procs []*worker
	startWorker := func(proc int) *worker {
		w := &worker{log: filepath.Join(dir, fmt.Sprintf("worker-%d.log", proc)), done: make(chan error, 1)}
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
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGSTOP))
		time.Sleep(pause)
		require.NoError(t, w.cmd.Process.Signal(syscall.SIGCONT))
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
			callOnce(fn, final, fmt.Sprintf("final-%d-%d", k, b), input{Key: key, Body: fmt.Sprintf("body-%d", b), Outcome: "ok"})
		}
	}
	require.NoError(t, f.Close())
	h, err = readHistory(append(logs, f.Name()))
	require.NoError(t, err)
	res := check(h)
	t.Logf("%s: %d processes (%d goroutines each, clocks skewed %v), %d keys at a time, %v: %d calls (%d runs, %d side effects), %d operations checked; faults: %d lost replies, %d pauses of %v, %d kills; %d keys completed, each by exactly one run; %d side effects of runs that lost their lease after it ran out",
		st.kind, len(procs), goroutines, skews, keys, length.Round(time.Second), res.calls, res.runs, res.effects, res.operations, h.cuts, pauses, pause, kills, res.completedKeys, res.lostLeaseEffects)
	if !broken {
		writeFigures(t, st.kind, fmt.Sprintf("%d worker processes at a time (%d in all) × %d goroutines, %d keys at a time, %v", workers, len(procs), goroutines, keys, length.Round(time.Second)), res, h.cuts, pauses, kills)
	}
	return res
}

// history is what the processes' logs hold, by call.
type history struct {
	calls map[string]*callEvents
	cuts  int
}

type callEvents struct {
	call, claimed, handled, returned *event
	effects                          []event
}

func readHistory(paths []string) (*history, error) {
	h := &history{calls: map[string]*callEvents{}}
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
			if e.E == "cuts" {
				h.cuts += e.N
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

// result is what check found.
type result struct {
	calls, runs, effects, operations int
	completedKeys, lostLeaseEffects  int
	violations                       []string
	linearizable                     porcupine.CheckResult
	illegal                          string
}

// check builds the operations of h, checks them with porcupine against the
// contract's model, and counts the side effects per completed key.
func check(h *history) result {
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
		base := opInput{Key: key, Owner: owner, Body: c.call.Body, Deadline: c.call.Deadline}
		for range c.effects {
			if effects[key] == nil {
				effects[key] = map[string]int{}
			}
			effects[key][owner]++
			res.effects++
		}
		if c.claimed != nil {
			res.runs++
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
	res.operations = len(ops)

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
		if n := effects[key][winner]; n != 1 {
			res.violations = append(res.violations, fmt.Sprintf("key %s: the completing run's side effect happened %d times", key, n))
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

	model := contractModel(int64(margin), int64(skewBound))
	check, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	res.linearizable = check
	if check == porcupine.Illegal {
		res.illegal = describeIllegal(model, ops, info)
	}
	return res
}

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
func writeFigures(t *testing.T, store, size string, res result, cuts, pauses, kills int) {
	path := os.Getenv("ICHIDO_HISTORY_FIGURES")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	require.NoError(t, err)
	defer f.Close()
	verdict := "0 violations"
	if len(res.violations) > 0 || res.linearizable != porcupine.Ok {
		verdict = fmt.Sprintf("%d violations, linearizable: %s", len(res.violations), res.linearizable)
	}
	_, err = fmt.Fprintf(f, "| %s | %s | %d | %d | %d | %d lost replies, %d pauses of %v, %d kills | %d (%d side effects of runs that lost their lease) | %s |\n",
		store, size, res.calls, res.runs, res.operations, cuts, pauses, pause, kills, res.completedKeys, res.lostLeaseEffects, verdict)
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
