// Package storekit is the harness of the adapters' store-backed tests: the
// stores every adapter runs on, set up in one place, the failing stores of
// the fault cases, and the cases the adapters share.
package storekit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// Main runs the tests of m and then stops the Redis and DynamoDB servers
// they shared. It returns the exit code for os.Exit.
func Main(m *testing.M) int {
	code := m.Run()
	redistest.StopShared()
	dynamotest.StopShared()
	return code
}

// Store is a store whose records a test can read.
type Store interface {
	idemstore.Store
	idemstore.Admin
}

// Backend is one kind of store the adapters run on.
type Backend struct {
	// Name is the backend's name in the tests' names.
	Name string
	// Package is the store's package, as ichido.store.name reports it.
	Package string
	// New returns a store of the test's own, on a real server (memstore:
	// in memory).
	New func(t *testing.T) Store
	// Down returns a store whose server cannot be reached.
	Down func(t *testing.T) idemstore.Store
	// Misconfigured returns a store that refuses every call for good. It
	// is nil where the backend has no cheap way to make one.
	Misconfigured func(t *testing.T) idemstore.Store
}

// Backends are memstore, PostgreSQL, Redis and DynamoDB, each started by
// the test helpers when a test first needs it.
func Backends() []Backend {
	return []Backend{
		{
			Name: "memstore", Package: "memstore",
			New:           func(*testing.T) Store { return memstore.New() },
			Down:          func(*testing.T) idemstore.Store { return FailingStore{} },
			Misconfigured: func(*testing.T) idemstore.Store { return FailingStore{Permanent: true} },
		},
		{
			Name: "postgres", Package: "pgstore",
			New: func(t *testing.T) Store {
				db := pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
					_, err := pgstore.Migrate(ctx, pool, nil)
					return err
				})
				st, err := pgstore.New(db.Pool, nil)
				require.NoError(t, err)
				return st
			},
			Down: func(t *testing.T) idemstore.Store {
				pool, err := pgxpool.New(context.Background(), fmt.Sprintf("postgres://postgres@%s/ichido?sslmode=disable&connect_timeout=5", ClosedAddr(t)))
				require.NoError(t, err)
				t.Cleanup(pool.Close)
				st, err := pgstore.New(pool, nil)
				require.NoError(t, err)
				return st
			},
		},
		{
			Name: "redis", Package: "redisstore",
			New: func(t *testing.T) Store {
				st, err := redisstore.New(redistest.NewClient(t), &redisstore.Options{KeyPrefix: "storekit-" + uuid.NewString() + ":"})
				require.NoError(t, err)
				return st
			},
			Down: func(t *testing.T) idemstore.Store {
				c := redis.NewClient(&redis.Options{Addr: ClosedAddr(t), DialTimeout: time.Second, MaxRetries: -1})
				t.Cleanup(func() { _ = c.Close() })
				st, err := redisstore.New(c, nil)
				require.NoError(t, err)
				return st
			},
		},
		{
			Name: "dynamodb", Package: "dynamostore",
			New: func(t *testing.T) Store {
				client := dynamotest.NewClient(t)
				st, err := dynamostore.New(client, &dynamostore.Options{Table: dynamotest.TableName(t)})
				require.NoError(t, err)
				dynamotest.CreateTable(t, client, st.CreateTableInput())
				return st
			},
			Down: func(t *testing.T) idemstore.Store {
				st, err := dynamostore.New(dynamotest.NewClientAt("http://"+ClosedAddr(t), dynamotest.ClientOptions{MaxAttempts: 1}), nil)
				require.NoError(t, err)
				return st
			},
			Misconfigured: func(t *testing.T) idemstore.Store {
				// A table that was never created: ResourceNotFoundException.
				st, err := dynamostore.New(dynamotest.NewClient(t), &dynamostore.Options{Table: dynamotest.TableName(t) + "-missing"})
				require.NoError(t, err)
				return st
			},
		},
	}
}

// RunMiddleware runs the library's HTTP behaviour table over real HTTP
// through mount (an adapter's router), on every backend.
func RunMiddleware(t *testing.T, mount storetest.Mount) {
	for _, b := range Backends() {
		t.Run(b.Name, func(t *testing.T) {
			t.Parallel()
			st := b.New(t)
			storetest.Run(t, storetest.Config{Parts: storetest.Middleware, Mount: mount, New: func(*testing.T) idemstore.Store { return st }})
		})
	}
}

// ClosedAddr is a loopback address nothing listens on.
func ClosedAddr(t *testing.T) string {
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	return fmt.Sprintf("127.0.0.1:%d", port)
}

// FailingStore fails every call as a store whose server is down
// (transient) or refuses the deployment (Permanent) does.
type FailingStore struct{ Permanent bool }

func (s FailingStore) fail(op string) error {
	return &idemstore.Error{Op: op, Err: errors.New("connection refused"), Permanent: s.Permanent}
}

func (s FailingStore) Claim(context.Context, idemstore.Claim) (idemstore.ClaimResult, error) {
	return idemstore.ClaimResult{}, s.fail("claim")
}
func (s FailingStore) Complete(context.Context, idemstore.Completion) error {
	return s.fail("complete")
}
func (s FailingStore) Release(context.Context, idemstore.Ref) error   { return s.fail("release") }
func (s FailingStore) Renew(context.Context, idemstore.Renewal) error { return s.fail("renew") }

// LostReplyStore commits the next claim, once Armed, on the real store and
// then loses its reply, as a connection reset after the server did the
// work does. Cuts counts the replies lost.
type LostReplyStore struct {
	idemstore.Store
	Armed atomic.Bool
	Cuts  atomic.Int32
}

func (s *LostReplyStore) Claim(ctx context.Context, c idemstore.Claim) (idemstore.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, c)
	if err == nil && s.Armed.CompareAndSwap(true, false) {
		s.Cuts.Add(1)
		return idemstore.ClaimResult{}, &idemstore.Error{Op: "claim", Err: errors.New("connection reset by peer")}
	}
	return res, err
}

// RequireSharedRecord checks the record that both RPC adapters keep for
// Create("a") by alice with the same key: the ids, the fingerprint and the
// response, pinned so that a service served by both on one store shares
// its keys.
func RequireSharedRecord(t *testing.T, store idemstore.Admin, userID, recordKey string) {
	t.Helper()
	require.Equal(t, "bd2ddae5-63ea-8b7c-bb9f-702e49b58309", userID)
	require.Equal(t, "408fd72c-15f8-84bc-8b85-215319964ff4", recordKey)
	rec, ok, err := store.Get(context.Background(), userID, recordKey)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, idemstore.StatusCompleted, rec.Status)
	require.Equal(t, "d86de7802d3c7d722713b89716cdcd0d0e77d6bce33c8bfa09fd2e666292a76d", rec.Fingerprint, "the fingerprint of Create(\"a\")")
	require.JSONEq(t, `{"type":"google.protobuf.Struct","message":"ChAKA3J1bhIJEQAAAAAAAPA/CgwKBXRpdGxlEgMaAWE="}`, rec.Response.Body)
}
