package storeenv_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func env(vars map[string]string) func(string) string {
	return func(name string) string { return vars[name] }
}

func TestKind(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		vars  map[string]string
		want  string
		names []string // variables the error names
	}{
		{"nothing set is postgres", nil, storeenv.Postgres, nil},
		{"postgres", map[string]string{"IDEMPOTENCY_STORE": "postgres"}, storeenv.Postgres, nil},
		{"redis", map[string]string{"IDEMPOTENCY_STORE": " redis ", "REDIS_URL": "rediss://cache:6379"}, storeenv.Redis, nil},
		{"unknown store", map[string]string{"IDEMPOTENCY_STORE": "mongodb"}, "", []string{"IDEMPOTENCY_STORE"}},
		{"dynamodb", map[string]string{"IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys", "AWS_REGION": "eu-west-1"}, storeenv.DynamoDB, nil},
		{"dynamodb without table", map[string]string{"IDEMPOTENCY_STORE": "dynamodb", "AWS_REGION": "eu-west-1"}, "", []string{"IDEMPOTENCY_TABLE"}},
		{"dynamodb without region", map[string]string{"IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys"}, "", []string{"AWS_REGION"}},
		{"a table without dynamodb", map[string]string{"IDEMPOTENCY_TABLE": "keys"}, "", []string{"IDEMPOTENCY_TABLE", "IDEMPOTENCY_STORE"}},
		{"a Redis URL with dynamodb", map[string]string{"IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys", "AWS_REGION": "eu-west-1", "REDIS_URL": "rediss://cache:6379"}, "", []string{"REDIS_URL", "dynamodb"}},
		{"redis without URL", map[string]string{"IDEMPOTENCY_STORE": "redis"}, "", []string{"REDIS_URL"}},
		{"a URL without redis", map[string]string{"REDIS_URL": "rediss://cache:6379"}, "", []string{"REDIS_URL", "IDEMPOTENCY_STORE"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := storeenv.Kind(env(c.vars))
			if c.names == nil {
				require.NoError(t, err)
				require.Equal(t, c.want, got)
				return
			}
			require.ErrorIs(t, err, storeenv.ErrEnv)
			var e *storeenv.Error
			require.ErrorAs(t, err, &e)
			for _, name := range c.names {
				require.Contains(t, err.Error(), name)
			}
		})
	}
}

// replays wraps a handler with store and checks that a retry replays.
func replays(t *testing.T, store idemstore.Store) {
	t.Helper()
	runs := 0
	h, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: fmt.Sprint(runs)}, nil
	}, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: discard, Metrics: discardWriter{}}})
	require.NoError(t, err)
	req := events.APIGatewayV2HTTPRequest{RawPath: "/orders", Headers: map[string]string{"idempotency-key": uuid.NewString()}}
	req.RequestContext.HTTP.Method = http.MethodPost
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": "auth0|" + uuid.NewString()}},
	}
	for range 2 {
		resp, err := h(context.Background(), req)
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, resp.StatusCode)
		require.Equal(t, "1", resp.Body)
	}
	require.Equal(t, 1, runs)
}

// newDB gives the test a schema of its own with the key store created in it
// by pgstore.Migrate.
func newDB(t *testing.T) *pgtest.DB {
	t.Helper()
	return pgtest.NewWith(t, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pgstore.Migrate(ctx, pool, nil)
		return err
	})
}

func TestOpenPostgresFromDatabaseURL(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	store, closeStore, err := storeenv.Open(context.Background(), env(map[string]string{"DB_AUTH": "url", "DATABASE_URL": db.URL}), nil)
	require.NoError(t, err)
	defer closeStore()
	require.IsType(t, &pgstore.Store{}, store)
	replays(t, store)
	closeStore()
	closeStore() // safe twice
}

func TestOpenPostgresWithAPool(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	// The database variables are not read: none is set.
	store, closeStore, err := storeenv.Open(context.Background(), env(nil), &storeenv.Options{Pool: db.Pool})
	require.NoError(t, err)
	closeStore()
	replays(t, store) // the pool is the caller's, still open
}

func TestOpenRedis(t *testing.T) {
	t.Parallel()
	store, closeStore, err := storeenv.Open(context.Background(), env(map[string]string{
		"IDEMPOTENCY_STORE": "redis", "REDIS_URL": redistest.URL(t),
	}), &storeenv.Options{Redis: &redisstore.Options{KeyPrefix: "storeenv-test:"}})
	require.NoError(t, err)
	defer closeStore()
	require.IsType(t, &redisstore.Store{}, store)
	replays(t, store)
}

func TestOpenRefusesBadSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		vars  map[string]string
		name2 string
	}{
		{"no database settings", nil, "DB_AUTH"},
		{"plain-text Redis over a network", map[string]string{"IDEMPOTENCY_STORE": "redis", "REDIS_URL": "redis://cache.example:6379"}, "REDIS_URL"},
	} {
		_, _, err := storeenv.Open(context.Background(), env(c.vars), nil)
		require.ErrorIs(t, err, storeenv.ErrEnv, c.name)
		require.ErrorContains(t, err, c.name2, c.name)
	}
	_, _, err := storeenv.Open(context.Background(), env(map[string]string{"DB_AUTH": "url"}), nil)
	require.ErrorIs(t, err, dbpool.ErrConfig)
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

type discardWriter struct{}

func (discardWriter) Write(p []byte) (int, error) { return len(p), nil }
