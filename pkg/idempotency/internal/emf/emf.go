// Package emf writes CloudWatch Embedded Metric Format lines: the counts of
// one protected run, in one Write, so that the lines of concurrent runs
// never interleave.
package emf

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// New returns a Writer of lines to w in the CloudWatch namespace.
func New(w io.Writer, namespace string) *Writer {
	return &Writer{w: w, namespace: namespace}
}

// Writer writes CloudWatch Embedded Metric Format lines, one Write
// per line so that concurrent requests never interleave. A line is the
// JSON object
//
//	{"FunctionName":…,"_aws":{"CloudWatchMetrics":[{"Namespace":…,"Dimensions":[["FunctionName"]],"Metrics":[{"Name":…,"Unit":"Count"},…]}],"Timestamp":…},"<metric>":1,…}
//
// with the members of the outer objects in byte order of their names, as
// encoding/json writes a map (FunctionName and its dimension only inside
// Lambda). The parts that never change are built once.
type Writer struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string

	once sync.Once
	head string // up to the metric list: `{"FunctionName":…,"_aws":{"CloudWatchMetrics":[{"Namespace":…,"Dimensions":[…],"Metrics":[`
	mid  string // between the metric list and the timestamp: `]}],"Timestamp":`
	buf  []byte // the line being written; guarded by mu
}

// Write writes one line that counts each metric of counts once, at the
// time at. The metric names are plain lower-case words. To io.Discard
// nothing is built: no one reads the line.
func (m *Writer) Write(at time.Time, counts []string) {
	if m.w == io.Discard {
		return
	}
	m.once.Do(func() {
		head := []byte{'{'}
		dims := "[]"
		if lambdacontext.FunctionName != "" {
			head = append(head, `"FunctionName":`...)
			head = appendJSONString(head, lambdacontext.FunctionName)
			head = append(head, ',')
			dims = `["FunctionName"]`
		}
		head = append(head, `"_aws":{"CloudWatchMetrics":[{"Namespace":`...)
		head = appendJSONString(head, m.namespace)
		head = append(head, `,"Dimensions":[`...)
		head = append(head, dims...)
		head = append(head, `],"Metrics":[`...)
		m.head = string(head)
		m.mid = `]}],"Timestamp":`
	})
	// Plain lower-case words, in byte order once sorted.
	slices.Sort(counts)
	m.mu.Lock()
	defer m.mu.Unlock()
	b := append(m.buf[:0], m.head...)
	for i, name := range counts {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"Name":"`...)
		b = append(b, name...)
		b = append(b, `","Unit":"Count"}`...)
	}
	b = append(b, m.mid...)
	b = strconv.AppendInt(b, at.UnixMilli(), 10)
	b = append(b, '}')
	for _, name := range counts {
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":1`...)
	}
	b = append(b, '}', '\n')
	m.buf = b
	_, _ = m.w.Write(b) // metrics are best effort
}

// appendJSONString appends s as a JSON string, as encoding/json writes it.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
