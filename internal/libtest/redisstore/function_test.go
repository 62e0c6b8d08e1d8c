package redisstore_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestFunctionBehaviour runs the behaviour table of Function and
// SQSHandler on the Redis store, on Redis and on Valkey.
func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	onEachServer(t, func(t *testing.T, srv server) {
		storetest.Run(t, storetest.Config{Parts: storetest.Function, New: func(t *testing.T) idemstore.Store {
			return must.Value(redisstore.New(srv.client(t), nil))
		}})
	})
}

// storeAt is a store on its own client at url, as one more process would
// have.
func storeAt(t *testing.T, url string) idemstore.Store {
	opts, err := redis.ParseURL(url)
	require.NoError(t, err)
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	return must.Value(redisstore.New(c, nil))
}

// TestSQSBatchAcrossProcesses has 8 processes, each with its own client,
// handle the same SQS batch at once: every record runs once.
func TestSQSBatchAcrossProcesses(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Processes, Processes: &storetest.ProcessesConfig{N: 8, WorkerTest: "TestSQSBatchWorker", URL: redistest.URL(t), NewAt: storeAt}})
}

// TestSQSBatchWorker is one process of TestSQSBatchAcrossProcesses.
func TestSQSBatchWorker(t *testing.T) {
	storetest.BatchWorker(t, storeAt)
}
