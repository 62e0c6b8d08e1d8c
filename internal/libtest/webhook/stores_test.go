package webhook_test

import (
	"context"
	"os"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	kit "github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// TestMain stops the Redis and DynamoDB servers the tests shared.
func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	dynamotest.StopShared()
	os.Exit(code)
}

// adminStore is a store whose records a test can list.
type adminStore interface {
	idemstore.Store
	idemstore.Admin
}

// backends are the stores the receivers run on: memstore, and PostgreSQL,
// Redis and DynamoDB on real servers, each a store of the test's own.
var backends = []struct {
	name  string
	store func(t *testing.T) adminStore
}{
	{"memstore", func(*testing.T) adminStore { return memstore.New() }},
	{"postgres", func(t *testing.T) adminStore {
		db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
			_, err := pgstore.Migrate(ctx, pool, nil)
			return err
		})
		return kit.Value(pgstore.New(db.Pool, nil))
	}},
	{"redis", func(t *testing.T) adminStore {
		return kit.Value(redisstore.New(redistest.NewClient(t), &redisstore.Options{KeyPrefix: "webhook-" + uuid.NewString() + ":"}))
	}},
	{"dynamodb", func(t *testing.T) adminStore {
		client := dynamotest.NewClient(t)
		st, err := dynamostore.New(client, &dynamostore.Options{Table: dynamotest.TableName(t)})
		require.NoError(t, err)
		dynamotest.CreateTable(t, client, st.CreateTableInput())
		return st
	}},
}
