package pgstore_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/pgtest"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idempotencytest"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestFunctionBehaviour runs the behaviour table of Function and
// SQSHandler on the PostgreSQL store.
func TestFunctionBehaviour(t *testing.T) {
	t.Parallel()
	idempotencytest.RunFunctionBehaviour(t, func(t *testing.T) idempotency.Store {
		return pgstore.New(pgtest.New(t).Pool, nil)
	})
}

// storeAt is a store on its own pool at url, as one more process would
// have.
func storeAt(t *testing.T, url string) idempotency.Store {
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pgstore.New(pool, nil)
}

// TestSQSBatchAcrossProcesses has 8 processes, each with its own pool,
// handle the same SQS batch at once: every record runs once.
func TestSQSBatchAcrossProcesses(t *testing.T) {
	t.Parallel()
	idempotencytest.RunBatchAcrossProcesses(t, 8, "TestSQSBatchWorker", pgtest.New(t).URL, storeAt)
}

// TestSQSBatchWorker is one process of TestSQSBatchAcrossProcesses.
func TestSQSBatchWorker(t *testing.T) {
	idempotencytest.BatchWorker(t, storeAt)
}
