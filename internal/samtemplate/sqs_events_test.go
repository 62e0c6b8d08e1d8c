package samtemplate_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"
)

// Every SQS sample is an events.SQSEvent that round-trips with no unknown
// field, from the template's queue shape, and has an expected answer whose
// failures name records of the batch.
func TestSQSEventsAreSQSEvents(t *testing.T) {
	t.Parallel()
	for name, want := range sampleEvents {
		if !strings.HasPrefix(name, "sqs-") {
			continue
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, "TaskActivityFunction", want.function)
			var ev events.SQSEvent
			decodeStrict(t, readEvent(t, name), &ev)
			out, err := json.Marshal(ev)
			require.NoError(t, err)
			var again events.SQSEvent
			decodeStrict(t, out, &again)
			require.Equal(t, ev, again, "round trip")
			require.NotEmpty(t, ev.Records)
			ids := map[string]bool{}
			for _, r := range ev.Records {
				require.Equal(t, "aws:sqs", r.EventSource)
				require.True(t, strings.HasPrefix(r.EventSourceARN, "arn:aws:sqs:"), r.EventSourceARN)
				require.NotEmpty(t, r.Attributes["ApproximateReceiveCount"])
				ids[r.MessageId] = true
			}
			raw, err := os.ReadFile(filepath.Join(moduleRoot(t), "events", "expected", name))
			require.NoError(t, err, "events/expected/%s gives the answer", name)
			var resp events.SQSEventResponse
			decodeStrict(t, raw, &resp)
			for _, f := range resp.BatchItemFailures {
				require.True(t, ids[f.ItemIdentifier], "%s is not a record of the batch", f.ItemIdentifier)
			}
		})
	}
}
