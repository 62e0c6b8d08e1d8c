package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestFunctionBehaviour runs the behaviour table of Function and
// SQSHandler on the PostgreSQL store.
func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Function, New: func(t *testing.T) idemstore.Store {
		return must.Value(pgstore.New(newDB(t).Pool, nil))
	}})
}

// storeAt is a store on its own pool at url, as one more process would
// have.
func storeAt(t *testing.T, url string) idemstore.Store {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return must.Value(pgstore.New(pool, nil))
}

// TestSQSBatchAcrossProcesses has 8 processes, each with its own pool,
// handle the same SQS batch at once: every record runs once.
func TestSQSBatchAcrossProcesses(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Processes, Processes: &storetest.ProcessesConfig{N: 8, WorkerTest: "TestSQSBatchWorker", URL: newDB(t).URL, NewAt: storeAt}})
}

// TestSQSBatchWorker is one process of TestSQSBatchAcrossProcesses.
func TestSQSBatchWorker(t *testing.T) {
	storetest.BatchWorker(t, storeAt)
}
