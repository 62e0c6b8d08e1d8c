package main

import (
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"time"
)

// delayProxy is a TCP proxy on loopback that holds every chunk of bytes for
// a fixed delay in each direction before passing it on, so that a
// measurement through it pays what a network hop costs (a Lambda function →
// RDS Proxy → Aurora path is of the order of half a millisecond each way).
// Order is kept: a chunk is written only after the chunks read before it.
type delayProxy struct {
	ln     net.Listener
	target string
	delay  time.Duration
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

// startDelayProxy listens on a free loopback port and forwards each
// connection to target with delay added each way.
func startDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, target: target, delay: delay}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = c.Close()
			continue
		}
		for _, conn := range []net.Conn{c, up} {
			if tc, ok := conn.(*net.TCPConn); ok {
				_ = tc.SetNoDelay(true)
			}
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, up)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

// chunk is bytes read at a moment, due for writing delay later.
type chunk struct {
	data []byte
	due  time.Time
}

// pipe copies from src to dst, each chunk delayed by p.delay.
func (p *delayProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	queue := make(chan chunk, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for c := range queue {
			waitUntil(c.due)
			if _, err := dst.Write(c.data); err != nil {
				for range queue {
				}
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			queue <- chunk{data: append([]byte(nil), buf[:n]...), due: time.Now().Add(p.delay)}
		}
		if err != nil {
			close(queue)
			<-done
			if tc, ok := dst.(*net.TCPConn); ok && errors.Is(err, io.EOF) {
				_ = tc.CloseWrite()
			} else {
				_ = dst.Close()
			}
			return
		}
	}
}

// waitUntil returns at t. The runtime's timers wake up to a millisecond
// late, more than the delay itself, so the last stretch is spent yielding
// in a loop.
func waitUntil(t time.Time) {
	if d := time.Until(t) - 1500*time.Microsecond; d > 0 {
		time.Sleep(d)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// Close stops listening and closes every proxied connection.
func (p *delayProxy) Close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
