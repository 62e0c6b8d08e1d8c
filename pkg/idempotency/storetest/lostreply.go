package storetest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
)

// ReplyCutter is a loopback TCP proxy in front of a store's server that can
// lose one reply. Armed with CutReplyTo, it lets the request that carries a
// marker through to the server. Then it drops the reply and closes that
// connection both ways. A timeout or a reset does the same after the server has
// already done the work. A client that connects to Addr instead of the server
// sees nothing else of it.
type ReplyCutter struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	marker []byte // armed when not nil
	conns  map[net.Conn]struct{}
	cuts   atomic.Int32
	wg     sync.WaitGroup
}

// NewReplyCutter starts a proxy to target (host:port) on a free loopback
// port; it stops when the test ends.
func NewReplyCutter(t testing.TB, target string) *ReplyCutter {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &ReplyCutter{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

// Addr is the address clients connect to instead of the server.
func (p *ReplyCutter) Addr() string { return p.ln.Addr().String() }

// CutReplyTo arms the proxy: the reply to the next request that holds
// marker is lost and its connection closed.
func (p *ReplyCutter) CutReplyTo(marker string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marker = []byte(marker)
}

// takeMarker disarms the proxy if chunk holds its marker.
func (p *ReplyCutter) takeMarker(chunk []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.marker == nil || !bytes.Contains(chunk, p.marker) {
		return false
	}
	p.marker = nil
	return true
}

// Cuts reports how many replies were lost so far.
func (p *ReplyCutter) Cuts() int { return int(p.cuts.Load()) }

func (p *ReplyCutter) accept() {
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 5*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.track(client, server)
		var cut atomic.Bool
		p.wg.Go(func() { p.pipe(server, client, &cut, false) })
		p.wg.Go(func() { p.pipe(client, server, &cut, true) })
	}
}

func (p *ReplyCutter) track(conns ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range conns {
		p.conns[c] = struct{}{}
	}
}

// pipe copies src to dst. On the request direction it marks the
// connection (cut) when a request holds the marker; on the reply direction
// a marked connection loses the reply and both ends are closed.
func (p *ReplyCutter) pipe(dst, src net.Conn, cut *atomic.Bool, reply bool) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			switch {
			case !reply && p.takeMarker(buf[:n]):
				cut.Store(true)
			case reply && cut.Load():
				p.cuts.Add(1)
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *ReplyCutter) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// runLostReply checks, through a real connection, that a claim whose
// reply is lost after the server committed it does not lock the key: the
// request gets its handler's answer in the same invocation, and its retry a
// replay. store must reach its server through cutter, and must not retry
// commands on its own (so that it is the decorator's recovery that is
// tested).
func runLostReply(t *testing.T, store idemstore.Store, cutter *ReplyCutter) {
	t.Helper()
	var runs atomic.Int32
	h, err := idempotency.Wrap(func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		n := runs.Add(1)
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json"}, Body: fmt.Sprintf(`{"run":%d}`, n)}, nil
	}, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Metrics: io.Discard}})
	require.NoError(t, err)
	user := uuid.NewString()
	event := func(key, body string) events.APIGatewayV2HTTPRequest {
		return v2Event(request{
			method:  http.MethodPost,
			path:    "/tasks",
			headers: map[string]string{"Content-Type": "application/json", "Idempotency-Key": key},
			body:    body,
			sub:     user,
		})
	}
	call := func(e events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		resp, err := h(ctx, e)
		require.NoError(t, err)
		return resp
	}
	// A first request opens the store's connection, so that the claim below
	// travels on a connection that is already set up.
	require.Equal(t, http.StatusCreated, call(event(uuid.NewString(), `{"title":"warm-up"}`)).StatusCode)
	runs.Store(0)

	// The claim is the first statement that carries the request's hash.
	req := event(uuid.NewString(), `{"title":"x"}`)
	hash, err := idempotency.Fingerprint(idempotency.RequestFrom(req))
	require.NoError(t, err)
	cutter.CutReplyTo(hash)
	first := call(req)
	require.Equal(t, 1, cutter.Cuts(), "the claim's reply was lost")
	require.Equal(t, http.StatusCreated, first.StatusCode, "the lost claim reply is recovered in the same invocation; body: %s", first.Body)
	require.Equal(t, int32(1), runs.Load())

	retry := call(req)
	require.Equal(t, http.StatusCreated, retry.StatusCode, "body: %s", retry.Body)
	require.Equal(t, "true", retry.Headers["Idempotent-Replayed"])
	require.Equal(t, first.Body, retry.Body)
	require.Equal(t, int32(1), runs.Load(), "the handler ran once")
}
