// Package capture collects output that several goroutines write at once (a
// child process's stdout and stderr, a logger shared by concurrent
// handlers) so that it can be read while it is still being written.
package capture

import (
	"bytes"
	"sync"
)

// Buffer is a bytes.Buffer that is safe for concurrent writers and readers.
// The zero value is an empty buffer ready to use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
