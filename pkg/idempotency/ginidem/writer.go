package ginidem

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// noWritten is the size of a response whose header is not written yet, as
// gin counts it.
const noWritten = -1

// errHijack is Hijack's answer on a protected request.
var errHijack = errors.New("ginidem: the connection of a protected request cannot be hijacked; serve it on a method that is not protected")

// bufferWriter is c.Writer while the handlers of a protected request run. It
// has gin's own writer semantics over the response the idempotency middleware
// buffers. A status is held until the first write or WriteHeaderNow, and Size
// is -1 until then.
type bufferWriter struct {
	http.ResponseWriter
	size   int
	status int
	// done is closed when the client's request ends, for CloseNotify.
	done <-chan struct{}
}

var _ gin.ResponseWriter = (*bufferWriter)(nil)

// Unwrap gives http.ResponseController the buffer.
func (w *bufferWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *bufferWriter) WriteHeader(code int) {
	if code > 0 && !w.Written() {
		w.status = code
	}
}

func (w *bufferWriter) WriteHeaderNow() {
	if !w.Written() {
		w.size = 0
		w.ResponseWriter.WriteHeader(w.status)
	}
}

func (w *bufferWriter) Write(data []byte) (int, error) {
	w.WriteHeaderNow()
	n, err := w.ResponseWriter.Write(data)
	w.size += n
	return n, err
}

func (w *bufferWriter) WriteString(s string) (int, error) {
	w.WriteHeaderNow()
	n, err := io.WriteString(w.ResponseWriter, s)
	w.size += n
	return n, err
}

func (w *bufferWriter) Status() int   { return w.status }
func (w *bufferWriter) Size() int     { return w.size }
func (w *bufferWriter) Written() bool { return w.size != noWritten }

// Flush sends the header to the buffer; the response itself reaches the
// client whole when the chain is done.
func (w *bufferWriter) Flush() {
	w.WriteHeaderNow()
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Hijack is refused: the response of a protected request is buffered to be
// kept, so there is no connection to take over.
func (w *bufferWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, errHijack
}

// CloseNotify reports when the client's request ends.
func (w *bufferWriter) CloseNotify() <-chan bool {
	ch := make(chan bool, 1)
	go func() {
		<-w.done
		ch <- true
	}()
	return ch
}

// Pusher is nil: nothing is pushed ahead of a buffered response.
func (w *bufferWriter) Pusher() http.Pusher { return nil }
