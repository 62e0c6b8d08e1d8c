package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/peers"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// The PeerShape benchmarks compare, on Redis 7.0 (the server whose
// completion is a script) and one client, the store's first request (the
// claim of a new key, then its completion) with the commands that a peer
// library with the same two round trips sends for its first request: the
// commands idemlease v1.1.0's redistore sends, two scripts by EVALSHA on a
// hash per record (package peers reproduces them).
//
//	reserve  EVALSHA <sha> 1 <key> "1" <token> <fingerprint> <lease deadline ms> <lease ttl ms>
//	         EXISTS; HSET of four fields (state, token, fp, lease_exp_ms); PEXPIRE → "OK"
//	complete EVALSHA <sha> 1 <key> <token> <payload> <record deadline ms> <ttl ms>
//	         HGET token; HGET state; HSET of three fields (state, payload, rec_exp_ms); PEXPIRE → "OK"
//
// The peer's token is 32 hexadecimal digits, its fingerprint 32 raw bytes
// (SHA-256), its payload the response in a varint framing (version,
// status, headers, body) that its HTTP layer builds; the payload is built
// in the loop too, since the store's Complete encodes its record. The
// store gets the decorator's shapes: lower-case UUIDs for the user, the
// key and the owner, a 64-digit request hash, benchResponse.
//
// The machine that runs them may be noisy: BenchmarkPeerShape measures
// each side alone (with the server's command statistics), the others run
// their sides interleaved in one loop (interleave), which is the fair
// comparison.

// BenchmarkPeerShape measures each side alone, on two clients: "default",
// go-redis's defaults for a redis:// URL (RESP3), as the other benchmarks
// of this package, and "fromenv", the client ClientFromEnv builds (RESP2,
// Lambda timeouts). Sub-benchmarks: ichido (Claim, then Complete, through
// the Store), peer (reserve, then complete), and each call alone
// (ichido-claim, ichido-complete, peer-reserve, peer-complete; the call
// before it runs before the timed loop).
//
// Besides the metrics of serverTime (whose server-µs/op counts the
// scripts alone when one ran: for ichido, the claim's SET is in
// ichido-claim), each reports per operation the round trips (rt/op, the
// client's writes), the bytes sent and received (req-B/op, reply-B/op), the
// CPU time of the server's main thread (server-cpu-µs/op: the commands,
// their parsing and the network I/O) and of this process
// (client-cpu-µs/op: go-redis, the encoding, the system calls), and the
// allocations.
func BenchmarkPeerShape(b *testing.B) {
	for _, cl := range peerClients {
		b.Run(cl.name, func(b *testing.B) {
			b.Run("ichido", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newIchidoFirst(b, c.Client)
				measure(b, c, func(i int) { f.claim(b, i); f.complete(b, i) })
			})
			b.Run("peer", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newPeerFirst(b, c.Client)
				measure(b, c, func(i int) { f.reserve(b, i); f.complete(b, i) })
			})
			b.Run("ichido-claim", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newIchidoFirst(b, c.Client)
				measure(b, c, func(i int) { f.claim(b, i) })
			})
			b.Run("ichido-complete", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newIchidoFirst(b, c.Client)
				f.claimAll(b)
				measure(b, c, func(i int) { f.complete(b, i) })
			})
			b.Run("peer-reserve", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newPeerFirst(b, c.Client)
				measure(b, c, func(i int) { f.reserve(b, i) })
			})
			b.Run("peer-complete", func(b *testing.B) {
				c := redis70(b, cl.opts(b))
				f := newPeerFirst(b, c.Client)
				f.reserveAll(b)
				measure(b, c, func(i int) { f.complete(b, i) })
			})
		})
	}
}

// BenchmarkPeerShapeInterleaved runs a first request of each side on each
// client of BenchmarkPeerShape in one loop (interleave), and reports the
// ratio of the medians of ichido to the peer on each client.
func BenchmarkPeerShapeInterleaved(b *testing.B) {
	var sides []interleavedSide
	for _, cl := range peerClients {
		c := redis70(b, cl.opts(b))
		ichido, peer := newIchidoFirst(b, c.Client), newPeerFirst(b, c.Client)
		sides = append(sides,
			interleavedSide{cl.name + "-ichido", func(i int) { ichido.claim(b, i); ichido.complete(b, i) }},
			interleavedSide{cl.name + "-peer", func(i int) { peer.reserve(b, i); peer.complete(b, i) }})
	}
	d := interleave(b, sides)
	for k := 0; k < len(sides); k += 2 {
		b.ReportMetric(float64(median(d[k]))/float64(median(d[k+1])), sides[k].name+"/peer-p50")
	}
}

// BenchmarkPeerShapeNewStore runs, in one loop (interleave) on the default
// client, the store's first request, the same through a Store made for the
// request (which does not know yet that Redis 7.0 has no SET … IFEQ, and
// asks: a third round trip), and the peer's.
func BenchmarkPeerShapeNewStore(b *testing.B) {
	c := redis70(b, peerClients[0].opts(b))
	ichido, fresh, peer := newIchidoFirst(b, c.Client), newIchidoFirst(b, c.Client), newPeerFirst(b, c.Client)
	d := interleave(b, []interleavedSide{
		{"ichido", func(i int) { ichido.claim(b, i); ichido.complete(b, i) }},
		{"newstore", func(i int) { fresh.st = must.Value(redisstore.New(c, nil)); fresh.claim(b, i); fresh.complete(b, i) }},
		{"peer", func(i int) { peer.reserve(b, i); peer.complete(b, i) }},
	})
	b.ReportMetric(float64(median(d[0]))/float64(median(d[2])), "ichido/peer-p50")
	b.ReportMetric(float64(median(d[1]))/float64(median(d[2])), "newstore/peer-p50")
}

// BenchmarkPeerShapeCalls runs the four calls of the two first requests in
// one loop (interleave), on the default client: each completion completes
// a record that its side claimed before the loop.
func BenchmarkPeerShapeCalls(b *testing.B) {
	c := redis70(b, peerClients[0].opts(b))
	claim, complete := newIchidoFirst(b, c.Client), newIchidoFirst(b, c.Client)
	reserve, peerComplete := newPeerFirst(b, c.Client), newPeerFirst(b, c.Client)
	complete.claimAll(b)
	peerComplete.reserveAll(b)
	interleave(b, []interleavedSide{
		{"ichido-claim", func(i int) { claim.claim(b, i) }},
		{"ichido-complete", func(i int) { complete.complete(b, i) }},
		{"peer-reserve", func(i int) { reserve.reserve(b, i) }},
		{"peer-complete", func(i int) { peerComplete.complete(b, i) }},
	})
}

// BenchmarkPeerShapeClaimReply weighs the client side of the claim of a
// new key, in one loop (interleave): the store's Claim ("store"); the same
// SET … NX PX … GET sent as a plain command with a value encoded
// beforehand ("setget": go-redis alone, whose nil reply is an error,
// redis.Nil, that it examines for a retry and for a bad connection); the
// same SET without GET ("setok"), whose reply is OK; and the SET … GET
// alone in a pipeline ("pipeget"), where a nil reply is not examined so.
func BenchmarkPeerShapeClaimReply(b *testing.B) {
	c := redis70(b, peerClients[0].opts(b))
	ctx := context.Background()
	f := newIchidoFirst(b, c.Client)
	value := []byte(strings.Repeat("v", 150))
	keys := func() []string {
		k := make([]string, b.N)
		for i := range k {
			k[i] = redisstore.DefaultKeyPrefix + "{" + uuid.NewString() + ":" + uuid.NewString() + "}"
		}
		return k
	}
	getKeys, okKeys, pipeKeys := keys(), keys(), keys()
	ttl := (24 * time.Hour).Milliseconds()
	interleave(b, []interleavedSide{
		{"store", func(i int) { f.claim(b, i) }},
		{"setget", func(i int) {
			if err := c.Do(ctx, "set", getKeys[i], value, "nx", "px", ttl, "get").Err(); err != redis.Nil {
				b.Fatal(err)
			}
		}},
		{"setok", func(i int) {
			if err := c.Do(ctx, "set", okKeys[i], value, "nx", "px", ttl).Err(); err != nil {
				b.Fatal(err)
			}
		}},
		{"pipeget", func(i int) {
			cmd := redis.NewStringCmd(ctx, "set", pipeKeys[i], value, "nx", "px", ttl, "get")
			pipe := c.Pipeline()
			_ = pipe.Process(ctx, cmd)
			_, _ = pipe.Exec(ctx)
			if err := cmd.Err(); err != redis.Nil {
				b.Fatal(err)
			}
		}},
	})
}

// BenchmarkPeerShapeScripts splits the server time of the store's
// completion: the complete script as the store sends it, and variants of
// it with the very same arguments (captured from the store's own EVALSHA),
// each over records claimed by the store before the timed loop; peer is
// the peer's complete script, over records its reserve script wrote. Each
// runs alone (with the server's command statistics); then the store's
// script runs in one loop with parse (interleaved: before and after the
// complete script read the record with head), and with the peer's
// (interleaved-peer).
//
//	store   record.lua + complete.lua, as the store runs it: the record's
//	        status and owner read by head
//	parse   the same with record.lua's parse in place of head, which also
//	        reads the lease and the expiry (two i64), as the complete
//	        script did before it used head
//	getset  GET, then SET of the rebuilt record: no check
//	noop    return 1: EVALSHA and its arguments alone
func BenchmarkPeerShapeScripts(b *testing.B) {
	lua := func(name string) string {
		v, err := os.ReadFile(name)
		if err != nil {
			b.Fatal(err)
		}
		return string(v)
	}
	const headCall = "local status, owner, last = head(cur)"
	complete := lua("complete.lua")
	if !strings.Contains(complete, headCall) {
		b.Fatalf("complete.lua no longer has %q", headCall)
	}
	variants := []struct {
		name   string
		script *redis.Script
	}{
		{"store", redis.NewScript(lua("record.lua") + complete)},
		{"parse", redis.NewScript(lua("record.lua") + strings.Replace(complete, headCall, "local status, _, _, owner, last = parse(cur)", 1))},
		{"getset", redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
local last = 35 + string.byte(cur, 32) * 256 + string.byte(cur, 33)
last = last + 1 + string.byte(cur, last) * 256 + string.byte(cur, last + 1)
redis.call('SET', KEYS[1],
  ARGV[2] .. string.sub(cur, 4, 11) .. ARGV[3] .. string.sub(cur, 32, last) .. ARGV[4] .. ARGV[5],
  'PX', ARGV[6])
return 1
`)},
		{"noop", redis.NewScript(`return 1`)},
	}
	// variant returns the i-th completion of the script s, over records
	// claimed before the loop with the captured owner.
	variant := func(b *testing.B, c *redis.Client, s *redis.Script) func(i int) {
		f := newIchidoFirst(b, c)
		args := completionArgs(b, c)
		for i := range b.N {
			f.claims[i].Owner = args[0].(string)
		}
		f.claimAll(b)
		return func(i int) {
			n, err := s.Run(context.Background(), c, []string{f.st.Key(f.claims[i].UserID, f.claims[i].Key)}, args...).Int64()
			if err != nil || n != 1 {
				b.Fatal(n, err)
			}
		}
	}
	peer := func(b *testing.B, c *redis.Client) func(i int) {
		f := newPeerFirst(b, c)
		f.reserveAll(b)
		return func(i int) { f.complete(b, i) }
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			c := redis70(b, peerClients[0].opts(b))
			measure(b, c, variant(b, c.Client, v.script))
		})
	}
	b.Run("peer", func(b *testing.B) {
		c := redis70(b, peerClients[0].opts(b))
		measure(b, c, peer(b, c.Client))
	})
	// The store's script against its former self, then against the peer's,
	// two sides at a time: the fewer the sides, the closer in time they run.
	b.Run("interleaved", func(b *testing.B) {
		c := redis70(b, peerClients[0].opts(b))
		d := interleave(b, []interleavedSide{
			{"store", variant(b, c.Client, variants[0].script)},
			{"parse", variant(b, c.Client, variants[1].script)},
		})
		b.ReportMetric(float64(median(d[0]))/float64(median(d[1])), "store/parse-p50")
	})
	b.Run("interleaved-peer", func(b *testing.B) {
		c := redis70(b, peerClients[0].opts(b))
		d := interleave(b, []interleavedSide{
			{"store", variant(b, c.Client, variants[0].script)},
			{"peer", peer(b, c.Client)},
		})
		b.ReportMetric(float64(median(d[0]))/float64(median(d[1])), "store/peer-p50")
	})
}

// completionArgs returns the arguments (ARGV) of the complete script that
// the store sends to complete a record with benchResponse.
func completionArgs(b *testing.B, c *redis.Client) []any {
	b.Helper()
	hooked := redis.NewClient(c.Options())
	defer hooked.Close()
	hook := &commandHook{}
	var args []any
	hook.after = func(cmd redis.Cmder, _ error) {
		if cmd.Name() == "evalsha" {
			args = cmd.Args()[4:]
		}
	}
	hooked.AddHook(hook)
	st := must.Value(redisstore.New(hooked, nil))
	claim := benchClaim(idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}, time.Now())
	ctx := context.Background()
	if _, err := st.Claim(ctx, claim); err != nil {
		b.Fatal(err)
	}
	if err := st.Complete(ctx, idemstore.Completion{Ref: claim.Ref, Response: benchResponse, Now: claim.Now, ExpiresAt: claim.ExpiresAt}); err != nil {
		b.Fatal(err)
	}
	if len(args) != 6 {
		b.Fatalf("the complete script's arguments: %v", args)
	}
	return args
}

// peerClients are the clients of BenchmarkPeerShape.
var peerClients = []struct {
	name string
	opts func(b *testing.B) *redis.Options
}{
	{"default", func(b *testing.B) *redis.Options {
		opts, err := redis.ParseURL(servers[0].url(b))
		if err != nil {
			b.Fatal(err)
		}
		return opts
	}},
	{"fromenv", func(b *testing.B) *redis.Options {
		url := servers[0].url(b)
		c, err := redisstore.ClientFromEnv(func(string) string { return url })
		if err != nil {
			b.Fatal(err)
		}
		opts := *c.(*redis.Client).Options()
		_ = c.Close()
		return &opts
	}},
}

// countedClient is a client whose connections count the bytes and the
// writes that pass through them; pid is its server's process id.
type countedClient struct {
	*redis.Client
	pid                   int
	written, read, writes atomic.Int64
}

// countingConn counts for its client. It hands go-redis the connection's
// SyscallConn, so that the pool's health check (a peek at the socket before
// each command) runs as on a plain connection.
type countingConn struct {
	net.Conn
	c *countedClient
}

func (cc countingConn) SyscallConn() (syscall.RawConn, error) {
	return cc.Conn.(syscall.Conn).SyscallConn()
}

func (cc countingConn) Write(p []byte) (int, error) {
	n, err := cc.Conn.Write(p)
	cc.c.written.Add(int64(n))
	cc.c.writes.Add(1)
	return n, err
}

func (cc countingConn) Read(p []byte) (int, error) {
	n, err := cc.Conn.Read(p)
	cc.c.read.Add(int64(n))
	return n, err
}

// redis70 returns a counted client of its own on the Redis server of the
// tests, with opts, and checks that the server is Redis 7.0.
func redis70(b *testing.B, opts *redis.Options) *countedClient {
	b.Helper()
	cc := &countedClient{}
	var d net.Dialer
	opts.Dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return countingConn{conn, cc}, nil
	}
	cc.Client = redis.NewClient(opts)
	b.Cleanup(func() { _ = cc.Close() })
	info, err := cc.Info(context.Background(), "server").Result()
	if err != nil {
		b.Fatal(err)
	}
	if !strings.Contains(info, "redis_version:7.0.") {
		b.Fatalf("%s is not Redis 7.0:\n%s", servers[0].name, info)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			if cc.pid, err = strconv.Atoi(v); err != nil {
				b.Fatal(err)
			}
		}
	}
	return cc
}

// measure times op over b.N operations and reports, besides serverTime's
// metrics, those of BenchmarkPeerShape.
func measure(b *testing.B, c *countedClient, op func(i int)) {
	b.Helper()
	report := serverTime(b, c.Client)
	written, read, writes := c.written.Load(), c.read.Load(), c.writes.Load()
	srv0 := serverRun(c.pid)
	self0 := selfCPU()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		op(i)
	}
	b.StopTimer()
	self := selfCPU() - self0
	srv := serverRun(c.pid) - srv0
	n := float64(b.N)
	b.ReportMetric(float64(c.writes.Load()-writes)/n, "rt/op")
	b.ReportMetric(float64(c.written.Load()-written)/n, "req-B/op")
	b.ReportMetric(float64(c.read.Load()-read)/n, "reply-B/op")
	b.ReportMetric(float64(self.Nanoseconds())/1e3/n, "client-cpu-µs/op")
	b.ReportMetric(float64(srv.Nanoseconds())/1e3/n, "server-cpu-µs/op")
	report(b.N)
}

// interleavedSide is one side of interleave: run does its i-th operation.
type interleavedSide struct {
	name string
	run  func(i int)
}

// interleave runs b.N operations of each side in one loop, in an order
// that rotates at each iteration, so that every side meets the same noise.
// It reports each side's mean, median and 90th percentile, and its CPU
// time per operation on the client (this process) and on the server (its
// main thread), and returns the durations.
func interleave(b *testing.B, sides []interleavedSide) [][]time.Duration {
	b.Helper()
	pid := redis70(b, peerClients[0].opts(b)).pid
	d := make([][]time.Duration, len(sides))
	client := make([]time.Duration, len(sides))
	server := make([]time.Duration, len(sides))
	for k := range d {
		d[k] = make([]time.Duration, b.N)
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range sides {
			k := (i + j) % len(sides)
			// Each side's CPU times leave out the readings themselves.
			srv0 := serverRun(pid)
			self0 := selfCPU()
			t0 := time.Now()
			sides[k].run(i)
			d[k][i] = time.Since(t0)
			self1 := selfCPU()
			server[k] += serverRun(pid) - srv0
			client[k] += self1 - self0
		}
	}
	b.StopTimer()
	n := float64(b.N)
	for k, s := range sides {
		reportLatencies(b, s.name, d[k])
		b.ReportMetric(float64(client[k].Nanoseconds())/1e3/n, s.name+"-client-cpu-µs/op")
		b.ReportMetric(float64(server[k].Nanoseconds())/1e3/n, s.name+"-server-cpu-µs/op")
	}
	return d
}

// serverRun returns the time the main thread of the server pid, which runs
// the commands, has spent on a CPU (Linux's schedstat): reading it sends
// the server nothing.
func serverRun(pid int) time.Duration {
	v, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/schedstat")
	if err != nil {
		return 0
	}
	ns, _ := strconv.ParseInt(strings.Fields(string(v))[0], 10, 64)
	return time.Duration(ns)
}

// selfCPU returns this process's CPU time, user and system.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// reportLatencies reports the mean, the median and the 90th percentile of
// the durations d, as side-ns/op, side-p50-ns and side-p90-ns.
func reportLatencies(b *testing.B, side string, d []time.Duration) {
	var sum time.Duration
	for _, x := range d {
		sum += x
	}
	b.ReportMetric(float64(sum.Nanoseconds())/float64(len(d)), side+"-ns/op")
	b.ReportMetric(float64(median(d).Nanoseconds()), side+"-p50-ns")
	b.ReportMetric(float64(percentile(d, 0.9).Nanoseconds()), side+"-p90-ns")
}

func median(d []time.Duration) time.Duration { return percentile(d, 0.5) }

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

// ichidoFirst is the store's first request: Claim of a new key, then
// Complete.
type ichidoFirst struct {
	st     *redisstore.Store
	claims []idemstore.Claim
}

func newIchidoFirst(b *testing.B, c *redis.Client) *ichidoFirst {
	b.Helper()
	f := &ichidoFirst{st: must.Value(redisstore.New(c, nil))}
	user, now := uuid.NewString(), time.Now()
	f.claims = make([]idemstore.Claim, b.N+1)
	for i := range f.claims {
		f.claims[i] = benchClaim(idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: uuid.NewString()}, now)
	}
	// One first request outside the timed loop: the store learns that the
	// server has no SET … IFEQ.
	f.claim(b, b.N)
	f.complete(b, b.N)
	return f
}

func (f *ichidoFirst) claimAll(b *testing.B) {
	for i := range b.N {
		f.claim(b, i)
	}
}

func (f *ichidoFirst) claim(b *testing.B, i int) {
	res, err := f.st.Claim(context.Background(), f.claims[i])
	if err != nil || !res.Claimed {
		b.Fatal(res, err)
	}
}

func (f *ichidoFirst) complete(b *testing.B, i int) {
	c := f.claims[i]
	if err := f.st.Complete(context.Background(), idemstore.Completion{Ref: c.Ref, Response: benchResponse, Now: c.Now, ExpiresAt: c.ExpiresAt}); err != nil {
		b.Fatal(err)
	}
}

// peerFirst sends the peer's first request: reserve, then complete
// (package peers).
type peerFirst struct {
	lease  peers.RedisLease
	keys   []string
	tokens []string
	fp     []byte
}

func newPeerFirst(b *testing.B, c *redis.Client) *peerFirst {
	b.Helper()
	f := &peerFirst{lease: peers.RedisLease{C: c}, fp: make([]byte, 32)}
	_, _ = rand.Read(f.fp)
	scope := uuid.NewString()
	f.keys = make([]string, b.N+1)
	f.tokens = make([]string, b.N+1)
	for i := range f.keys {
		f.keys[i] = "idemlease:" + scope + ":" + uuid.NewString()
		t := make([]byte, 16)
		_, _ = rand.Read(t)
		f.tokens[i] = hex.EncodeToString(t)
	}
	// One first request outside the timed loop, as for the store.
	f.reserve(b, b.N)
	f.complete(b, b.N)
	return f
}

func (f *peerFirst) reserveAll(b *testing.B) {
	for i := range b.N {
		f.reserve(b, i)
	}
}

func (f *peerFirst) reserve(b *testing.B, i int) {
	if ok, err := f.lease.Reserve(context.Background(), f.keys[i], f.tokens[i], f.fp, 12*time.Second); err != nil || !ok {
		b.Fatal(ok, err)
	}
}

func (f *peerFirst) complete(b *testing.B, i int) {
	payload := peers.Payload(benchResponse.StatusCode, benchResponse.Headers, benchResponse.Body)
	if err := f.lease.Complete(context.Background(), f.keys[i], f.tokens[i], payload, 24*time.Hour); err != nil {
		b.Fatal(err)
	}
}
