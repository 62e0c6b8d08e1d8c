package storetest

import (
	"bytes"
	"sync"
)

// logBuffer collects the lines that concurrent handlers log and that the
// cases read while the handlers still run.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p. It never fails.
func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
