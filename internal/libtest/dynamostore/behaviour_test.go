package dynamostore_test

import (
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestHTTPBehaviour runs the decorator's HTTP behaviour table on DynamoDB.
func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	client := dynamotest.NewClient(t)
	storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: storeOn(client, newTable(t, client, nil))})
}

// TestFunctionBehaviour runs the behaviour table of Function and
// SQSHandler on DynamoDB.
func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	client := dynamotest.NewClient(t)
	storetest.Run(t, storetest.Config{Parts: storetest.Function, New: storeOn(client, newTable(t, client, nil))})
}

// storeURL names a table at an endpoint, for another process:
// endpoint?table=name.
func storeURL(endpoint, table string) string {
	return endpoint + "?" + url.Values{"table": {table}}.Encode()
}

// storeAt is a store on its own client at the endpoint and table u names
// (storeURL), as one more process would have.
func storeAt(t *testing.T, u string) idemstore.Store {
	parsed, err := url.Parse(u)
	require.NoError(t, err)
	table := parsed.Query().Get("table")
	parsed.RawQuery = ""
	st, err := dynamostore.New(dynamotest.NewClientAt(parsed.String(), dynamotest.ClientOptions{}), &dynamostore.Options{Table: table})
	require.NoError(t, err)
	return st
}

// TestSQSBatchAcrossProcesses has 8 processes, each with its own client,
// handle the same SQS batch at once: every record runs once.
func TestSQSBatchAcrossProcesses(t *testing.T) {
	t.Parallel()
	client := dynamotest.NewClient(t)
	table := newTable(t, client, nil)
	storetest.Run(t, storetest.Config{Parts: storetest.Processes, Processes: &storetest.ProcessesConfig{N: 8, WorkerTest: "TestSQSBatchWorker", URL: storeURL(dynamotest.Endpoint(t), table), NewAt: storeAt}})
}

// TestSQSBatchWorker is one process of TestSQSBatchAcrossProcesses.
func TestSQSBatchWorker(t *testing.T) {
	storetest.BatchWorker(t, storeAt)
}

// TestLostClaimReply cuts the connection after DynamoDB ran the claim's
// PutItem and before its reply arrives. The client does not retry on its
// own here (one attempt), so what is checked is the decorator's recovery:
// the request still gets its handler's answer, and its retry the replay.
func TestLostClaimReply(t *testing.T) {
	t.Parallel()
	srv := dynamotest.StartT(t)
	setup := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	table := newTable(t, setup, nil)
	storetest.Run(t, storetest.Config{Parts: storetest.LostReply, Server: srv.Addr(), Through: func(t *testing.T, addr string) idemstore.Store {
		client := dynamotest.NewClientAt("http://"+addr, dynamotest.ClientOptions{MaxAttempts: 1})
		st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
		require.NoError(t, err)
		return st
	}})
}

// TestLostClaimReplySDKRetry is the same cut with the SDK's own retries
// on: the SDK sends the PutItem again, whose condition fails on the
// caller's own record, which the store counts as its claim.
func TestLostClaimReplySDKRetry(t *testing.T) {
	t.Parallel()
	srv := dynamotest.StartT(t)
	setup := dynamotest.NewClientAt(srv.Endpoint, dynamotest.ClientOptions{})
	table := newTable(t, setup, nil)
	storetest.Run(t, storetest.Config{Parts: storetest.LostReply, Server: srv.Addr(), Through: func(t *testing.T, addr string) idemstore.Store {
		client := dynamotest.NewClientAt("http://"+addr, dynamotest.ClientOptions{})
		st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
		require.NoError(t, err)
		return st
	}})
}
