package connectidem_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/must"
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

// backend is one kind of store the behaviour table runs on.
type backend struct {
	name string
	// store returns a store on a real server (memstore: in memory), which
	// the cases of one test share with random users and keys.
	store func(t *testing.T) idemstore.Store
	// down returns a store whose server cannot be reached.
	down func(t *testing.T) idemstore.Store
	// misconfigured returns a store that refuses every call for good, or
	// is nil when the backend has no cheap way to make one.
	misconfigured func(t *testing.T) idemstore.Store
}

// backends are memstore, PostgreSQL, Redis and DynamoDB, each started by
// the test helpers when the test first needs it.
func backends() []backend {
	return []backend{
		{
			name:  "memstore",
			store: func(*testing.T) idemstore.Store { return memstore.New() },
			down:  func(*testing.T) idemstore.Store { return failingStore{} },
			misconfigured: func(*testing.T) idemstore.Store {
				return failingStore{permanent: true}
			},
		},
		{
			name: "postgres",
			store: func(t *testing.T) idemstore.Store {
				db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
					_, err := pgstore.Migrate(ctx, pool, nil)
					return err
				})
				return must.Value(pgstore.New(db.Pool, nil))
			},
			down: func(t *testing.T) idemstore.Store {
				pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@%s/ichido?sslmode=disable&connect_timeout=5", closedAddr(t)))
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				return must.Value(pgstore.New(pool, nil))
			},
		},
		{
			name: "redis",
			store: func(t *testing.T) idemstore.Store {
				return must.Value(redisstore.New(redistest.NewClient(t), &redisstore.Options{KeyPrefix: "rpc-test-" + uuid.NewString() + ":"}))
			},
			down: func(t *testing.T) idemstore.Store {
				c := redis.NewClient(&redis.Options{Addr: closedAddr(t), DialTimeout: time.Second, MaxRetries: -1})
				t.Cleanup(func() { _ = c.Close() })
				return must.Value(redisstore.New(c, nil))
			},
		},
		{
			name: "dynamodb",
			store: func(t *testing.T) idemstore.Store {
				client := dynamotest.NewClient(t)
				st, err := dynamostore.New(client, &dynamostore.Options{Table: dynamotest.TableName(t)})
				require.NoError(t, err)
				dynamotest.CreateTable(t, client, st.CreateTableInput())
				return st
			},
			down: func(t *testing.T) idemstore.Store {
				st, err := dynamostore.New(dynamotest.NewClientAt("http://"+closedAddr(t), dynamotest.ClientOptions{MaxAttempts: 1}), nil)
				require.NoError(t, err)
				return st
			},
			misconfigured: func(t *testing.T) idemstore.Store {
				// A table that was never created: ResourceNotFoundException.
				st, err := dynamostore.New(dynamotest.NewClient(t), &dynamostore.Options{Table: dynamotest.TableName(t) + "-missing"})
				require.NoError(t, err)
				return st
			},
		},
	}
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// failingStore fails every call as a store whose server is down
// (transient) or refuses the deployment (permanent) does.
type failingStore struct{ permanent bool }

func (s failingStore) fail(op string) error {
	return &idemstore.Error{Op: op, Err: errors.New("connection refused"), Permanent: s.permanent}
}

func (s failingStore) Claim(context.Context, idemstore.Claim) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, s.fail("claim")
}
func (s failingStore) Complete(context.Context, idemstore.Completion) error {
	return s.fail("complete")
}
func (s failingStore) Release(context.Context, idemstore.Ref) error   { return s.fail("release") }
func (s failingStore) Renew(context.Context, idemstore.Renewal) error { return s.fail("renew") }

// lostReplyStore commits the next claim on the real store and then loses
// its reply, as a connection reset after the server did the work does.
type lostReplyStore struct {
	idemstore.Store
	armed atomic.Bool
	cuts  atomic.Int32
}

func (s *lostReplyStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && s.armed.CompareAndSwap(true, false) {
		s.cuts.Add(1)
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errors.New("connection reset by peer")}
	}
	return res, err
}
