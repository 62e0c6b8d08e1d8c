package idempotency

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// Outcome is what became of a protected request; it is the "outcome" field
// of the log line and the name of the metric counted for the request.
type Outcome string

// Outcomes.
const (
	// OutcomeCompleted: the handler ran and its response was stored.
	OutcomeCompleted Outcome = "completed"
	// OutcomeReleased: the handler ran, failed (error, panic, 5xx or a
	// transient 4xx) and its record was deleted so that a retry runs again.
	OutcomeReleased Outcome = "released"
	// OutcomeLeaseLost: the handler ran but its lease had been taken over,
	// so nothing was stored or deleted.
	OutcomeLeaseLost Outcome = "lease_lost"
	// OutcomeReplayed: a stored response was replayed.
	OutcomeReplayed Outcome = "replayed"
	// OutcomeInProgress: refused with 409, the first request still runs.
	OutcomeInProgress Outcome = "in_progress"
	// OutcomeMismatch: refused with 422, the key was used for another request.
	OutcomeMismatch Outcome = "mismatch"
	// OutcomeStoreError: a store call failed. On claim the request was
	// refused with 503; on complete or release the handler's response was
	// returned and the record is left to its lease.
	OutcomeStoreError Outcome = "store_error"
	// OutcomeRejected: refused before the store was consulted (400 or 401).
	OutcomeRejected Outcome = "rejected"
	// OutcomeTooLarge: refused with 413 because the body is larger than
	// Config.MaxBodyBytes; the store was not consulted.
	OutcomeTooLarge Outcome = "too_large"
)

// metricClaimed counts the requests whose handler ran, whatever followed.
const metricClaimed = "claimed"

// metricStoreRetried counts the requests in which a failed store call was
// tried again (a claim whose reply may have been lost, a completion or
// release that failed), whatever the retry gave.
const metricStoreRetried = "store_retried"

// observation gathers what one protected request did; emit writes it as
// one log line and one EMF line.
type observation struct {
	start     time.Time
	method    string
	path      string
	function  string // the name of a Function or SQSHandler
	key       string
	user      string
	owner     string
	outcome   Outcome
	status    int
	reason    string // problem code of a refusal
	claimed   bool
	handler   string // "ok", "error" or "panic"
	storeMS   []storeCall
	handlerMS float64
	err       error // internal; logged, never sent to a client
}

// storeCall is the latency of one Store call; a repeated call adds up.
type storeCall struct {
	op    string // "claim", "complete" or "release"
	ms    float64
	calls int
}

// timed records the latency of one Store call.
func (o *observation) timed(op string, call func() error) error {
	start := time.Now()
	err := call()
	ms := float64(time.Since(start).Microseconds()) / 1000
	for i := range o.storeMS {
		if o.storeMS[i].op == op {
			o.storeMS[i].ms += ms
			o.storeMS[i].calls++
			return err
		}
	}
	o.storeMS = append(o.storeMS, storeCall{op: op, ms: ms, calls: 1})
	return err
}

// retried reports whether a Store call was made more than once.
func (o *observation) retried() bool {
	for _, c := range o.storeMS {
		if c.calls > 1 {
			return true
		}
	}
	return false
}

func (o *observation) emit(ctx context.Context, logger *slog.Logger, metrics *metricsWriter) {
	attrs := []slog.Attr{slog.String("outcome", string(o.outcome))}
	if o.function != "" {
		attrs = append(attrs, slog.String("function", o.function))
	} else {
		attrs = append(attrs, slog.String("method", o.method), slog.String("path", o.path))
	}
	if o.key != "" {
		attrs = append(attrs, slog.String("key", o.key))
	}
	if o.user != "" {
		attrs = append(attrs, slog.String("user", o.user))
	}
	if o.owner != "" {
		attrs = append(attrs, slog.String("owner", o.owner))
	}
	if o.status != 0 {
		attrs = append(attrs, slog.Int("status", o.status))
	}
	if o.reason != "" {
		attrs = append(attrs, slog.String("reason", o.reason))
	}
	attrs = append(attrs, slog.Bool("claimed", o.claimed))
	if o.handler != "" {
		attrs = append(attrs, slog.String("handler", o.handler), slog.Float64("handler_ms", o.handlerMS))
	}
	if len(o.storeMS) > 0 {
		store := make([]any, 0, len(o.storeMS))
		for _, c := range o.storeMS {
			store = append(store, slog.Float64(c.op+"_ms", c.ms))
			if c.calls > 1 {
				store = append(store, slog.Int(c.op+"_calls", c.calls))
			}
		}
		attrs = append(attrs, slog.Group("store", store...))
	}
	if o.err != nil {
		attrs = append(attrs, slog.String("error", o.err.Error()))
	}
	level := slog.LevelInfo
	switch o.outcome {
	case OutcomeLeaseLost:
		level = slog.LevelWarn
	case OutcomeStoreError:
		level = slog.LevelError
	}
	logger.LogAttrs(ctx, level, "idempotency", attrs...)

	counts := map[string]float64{string(o.outcome): 1}
	if o.claimed {
		counts[metricClaimed] = 1
	}
	if o.retried() {
		counts[metricStoreRetried] = 1
	}
	metrics.write(o.start, counts)
}

// metricsWriter writes CloudWatch Embedded Metric Format lines, one Write
// per line so that concurrent requests never interleave.
type metricsWriter struct {
	mu        sync.Mutex
	w         io.Writer
	namespace string
}

func (m *metricsWriter) write(at time.Time, counts map[string]float64) {
	type metric struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	type directive struct {
		Namespace  string     `json:"Namespace"`
		Dimensions [][]string `json:"Dimensions"`
		Metrics    []metric   `json:"Metrics"`
	}
	dims := []string{}
	doc := map[string]any{}
	if lambdacontext.FunctionName != "" {
		dims = append(dims, "FunctionName")
		doc["FunctionName"] = lambdacontext.FunctionName
	}
	d := directive{Namespace: m.namespace, Dimensions: [][]string{dims}}
	for name, v := range counts {
		d.Metrics = append(d.Metrics, metric{Name: name, Unit: "Count"})
		doc[name] = v
	}
	// Map iteration is random; keep the line stable for readers and tests.
	slices.SortFunc(d.Metrics, func(a, b metric) int { return strings.Compare(a.Name, b.Name) })
	doc["_aws"] = map[string]any{
		"Timestamp":         at.UnixMilli(),
		"CloudWatchMetrics": []directive{d},
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(doc); err != nil {
		return // cannot happen: plain strings and numbers
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	_, _ = m.w.Write(buf.Bytes()) // metrics are best effort
}
