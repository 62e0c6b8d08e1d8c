package ginidem_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/gin-gonic/gin"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/ginidem"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestMain keeps gin quiet (no debug lines on standard output, where the
// Examples' output is compared) and stops the Redis and DynamoDB servers
// the tests started.
func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	code := m.Run()
	redistest.StopShared()
	dynamotest.StopShared()
	os.Exit(code)
}

// mount puts the idempotency middleware in a gin router as an application
// does: gin's logger before it, a catch-all route after it, and 405 for a
// method the router does not know.
func mount(mw func(http.Handler) http.Handler, h http.Handler) http.Handler {
	r := gin.New()
	r.HandleMethodNotAllowed = true
	r.Use(gin.LoggerWithWriter(io.Discard), ginidem.Adapt(mw))
	r.Any("/*path", gin.WrapH(h))
	return r
}

// TestMiddlewareBehaviour runs the library's HTTP behaviour table over real
// HTTP through a gin router, on every store.
func TestMiddlewareBehaviour(t *testing.T) {
	t.Parallel()
	for _, s := range stores {
		t.Run(s.name, func(t *testing.T) {
			t.Parallel()
			storetest.Run(t, storetest.Config{Parts: storetest.Middleware, New: s.new(t), Mount: mount})
		})
	}
}

// store is a store the tests run on.
type store struct {
	name string
	// new returns the constructor of the stores of one test.
	new func(t *testing.T) func(t *testing.T) idemstore.Store
}

var stores = []store{
	{"memstore", func(*testing.T) func(*testing.T) idemstore.Store {
		return func(*testing.T) idemstore.Store { return memstore.New() }
	}},
	{"postgres", func(*testing.T) func(*testing.T) idemstore.Store {
		return func(t *testing.T) idemstore.Store {
			return must.Value(pgstore.New(pgtest.NewWith(t, migrate).Pool, nil))
		}
	}},
	{"redis", func(*testing.T) func(*testing.T) idemstore.Store {
		return func(t *testing.T) idemstore.Store { return must.Value(redisstore.New(redistest.NewClient(t), nil)) }
	}},
	{"dynamodb", func(t *testing.T) func(*testing.T) idemstore.Store {
		client := dynamotest.NewClient(t)
		st, err := dynamostore.New(client, &dynamostore.Options{Table: dynamotest.TableName(t)})
		require.NoError(t, err)
		dynamotest.CreateTable(t, client, st.CreateTableInput())
		return func(*testing.T) idemstore.Store { return st }
	}},
}

// migrate creates the key store in the schema of pool's search_path.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pgstore.Migrate(ctx, pool, nil)
	return err
}
