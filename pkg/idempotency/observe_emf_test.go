package idempotency

import (
	"bytes"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/ichido/ichido/pkg/idempotency/internal/emf"
	"github.com/stretchr/testify/require"
)

// The EMF line is assembled by hand; it must be byte for byte what
// encoding/json writes for the same document (members of maps in byte
// order of their names, the directive's in the order of its fields).
func TestMetricsLineIsWhatEncodingJSONWrites(t *testing.T) {
	type metric struct {
		Name string `json:"Name"`
		Unit string `json:"Unit"`
	}
	type directive struct {
		Namespace  string     `json:"Namespace"`
		Dimensions [][]string `json:"Dimensions"`
		Metrics    []metric   `json:"Metrics"`
	}
	reference := func(namespace, function string, at time.Time, counts []string) []byte {
		dims := []string{}
		doc := map[string]any{}
		if function != "" {
			dims = append(dims, "FunctionName")
			doc["FunctionName"] = function
		}
		d := directive{Namespace: namespace, Dimensions: [][]string{dims}}
		sorted := slices.Sorted(slices.Values(counts))
		for _, name := range sorted {
			d.Metrics = append(d.Metrics, metric{Name: name, Unit: "Count"})
			doc[name] = 1.0
		}
		doc["_aws"] = map[string]any{"Timestamp": at.UnixMilli(), "CloudWatchMetrics": []directive{d}}
		var buf bytes.Buffer
		require.NoError(t, json.NewEncoder(&buf).Encode(doc))
		return buf.Bytes()
	}
	at := time.Date(2026, 12, 1, 10, 0, 0, 123_000_000, time.UTC)
	saved := lambdacontext.FunctionName
	t.Cleanup(func() { lambdacontext.FunctionName = saved })
	for _, function := range []string{"", "tasks-CreateTaskFunction-1a2B", `odd "name" <&>`} {
		for _, namespace := range []string{"ichido", `tasks "api" <&>`} {
			lambdacontext.FunctionName = function
			var out bytes.Buffer
			m := emf.New(&out, namespace)
			for _, counts := range [][]string{
				{string(OutcomeReplayed)},
				{string(OutcomeCompleted), metricClaimed},
				{string(OutcomeStoreError), metricClaimed, metricStoreRetried},
				{string(OutcomeReleased), metricStoreRetried, metricClaimed},
			} {
				out.Reset()
				m.Write(at, slices.Clone(counts))
				require.Equal(t, string(reference(namespace, function, at, counts)), out.String(), "function %q namespace %q counts %v", function, namespace, counts)
			}
		}
	}
}
