package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeAWS answers the AWS CLI commands smoke runs, as the CLI would with
// --output json, and records them.
type fakeAWS struct {
	mu        sync.Mutex
	calls     []string
	outcomes  []string // the activity function's log outcomes for the event
	eventID   string
	statusErr bool
}

func (f *fakeAWS) run(_ context.Context, args ...string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, strings.Join(args[:2], " "))
	arg := func(name string) string {
		for i, a := range args {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	switch strings.Join(args[:2], " ") {
	case "cloudformation describe-stacks":
		status := "UPDATE_COMPLETE"
		if f.statusErr {
			status = "UPDATE_ROLLBACK_COMPLETE"
		}
		return []byte(`{"Stacks":[{"StackStatus":"` + status + `","Outputs":[
			{"OutputKey":"ApiUrl","OutputValue":"https://abc.execute-api.eu-west-1.amazonaws.com"},
			{"OutputKey":"UserPoolId","OutputValue":"eu-west-1_abc"},
			{"OutputKey":"UserPoolClientId","OutputValue":"client1"},
			{"OutputKey":"TaskEventsQueueUrl","OutputValue":"https://sqs.eu-west-1.amazonaws.com/1/q"},
			{"OutputKey":"MigrateFunctionName","OutputValue":"stack-MigrateFunction-1"}]}]}`), nil
	case "cognito-idp admin-initiate-auth":
		if arg("--auth-flow") != "ADMIN_USER_PASSWORD_AUTH" {
			return nil, fmt.Errorf("unexpected flow")
		}
		claims, _ := json.Marshal(map[string]string{"sub": "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"})
		tok := "e30." + base64.RawURLEncoding.EncodeToString(claims) + ".sig"
		return []byte(`{"AuthenticationResult":{"AccessToken":"` + tok + `"}}`), nil
	case "cloudformation describe-stack-resource":
		return []byte(`{"StackResourceDetail":{"PhysicalResourceId":"/aws/lambda/stack-TaskActivity"}}`), nil
	case "sqs send-message":
		var ev struct {
			EventID string `json:"event_id"`
		}
		_ = json.Unmarshal([]byte(arg("--message-body")), &ev)
		f.eventID = ev.EventID
		return []byte(`{"MessageId":"m"}`), nil
	case "logs filter-log-events":
		if !strings.Contains(arg("--filter-pattern"), f.eventID) {
			return []byte(`{"events":[]}`), nil
		}
		var events []map[string]string
		for _, o := range f.outcomes {
			events = append(events, map[string]string{"message": `{"outcome":"` + o + `","key":"` + f.eventID + `"}`})
		}
		b, _ := json.Marshal(map[string]any{"events": events})
		return b, nil
	}
	return []byte(`{}`), nil
}

func TestStackParts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	f := &fakeAWS{}
	aws := &awsCLI{region: "eu-west-1", run: f.run}
	out, err := stackOutputs(ctx, aws, "ichido")
	require.NoError(t, err)
	require.Equal(t, "eu-west-1_abc", out["UserPoolId"])
	for _, k := range requiredOutputs {
		require.NotEmpty(t, out[k], k)
	}
	f.statusErr = true
	_, err = stackOutputs(ctx, aws, "ichido")
	require.ErrorContains(t, err, "UPDATE_ROLLBACK_COMPLETE")

	u, err := createTestUser(ctx, aws, "eu-west-1_abc", "client1")
	require.NoError(t, err)
	require.Equal(t, "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f", u.sub)
	require.NoError(t, u.delete(ctx, aws))
	require.Equal(t, []string{"cloudformation describe-stacks", "cloudformation describe-stacks",
		"cognito-idp admin-create-user", "cognito-idp admin-set-user-password", "cognito-idp admin-initiate-auth",
		"cognito-idp admin-delete-user"}, f.calls)

	for _, tc := range []struct {
		outcomes []string
		verdict  string
	}{
		{[]string{"completed", "replayed"}, "PASS"},
		{[]string{"completed", "in_progress", "replayed"}, "PASS"},
		{[]string{"completed", "completed"}, "FAIL"},
	} {
		f := &fakeAWS{outcomes: tc.outcomes}
		var buf bytes.Buffer
		r := &report{w: &buf}
		stackQueueCheck(ctx, &awsCLI{run: f.run}, "ichido", "https://sqs/q", u.sub, r)
		require.True(t, strings.HasPrefix(buf.String(), tc.verdict+"  sqs-once"), "%v: %s", tc.outcomes, buf.String())
		require.Equal(t, 2, strings.Count(strings.Join(f.calls, "\n"), "sqs send-message"), "the event is sent twice")
	}
}
