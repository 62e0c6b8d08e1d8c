package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DB is a schema of its own for one test.
type DB struct {
	// Schema is the schema's name; it is the connection's search_path.
	Schema string
	// URL connects with search_path set to Schema.
	URL string
	// Pool is a pool on URL, closed at the end of the test.
	Pool *pgxpool.Pool
}

// NewWith gives the test a fresh schema with up applied in it (up gets a
// pool whose search_path is the schema): the sample app's migrations
// (internal/apptest) or the key store's alone (pkg/internal/storedb). This
// package imports neither, so that the library's module does not depend on
// the app's. The schema (and its pg_cron jobs) is dropped when the test
// ends. A test that cannot get its database fails with a message saying
// what to install.
func NewWith(t testing.TB, up func(context.Context, *pgxpool.Pool) error) *DB {
	t.Helper()
	db := NewEmpty(t)
	if err := up(context.Background(), db.Pool); err != nil {
		t.Fatalf("pgtest: applying migrations in schema %s: %v", db.Schema, err)
	}
	return db
}

// NewEmpty gives the test a fresh, empty schema, for tests of the migrations
// themselves.
func NewEmpty(t testing.TB) *DB {
	t.Helper()
	ctx := context.Background()
	base, err := SharedURL(ctx)
	if err != nil {
		t.Fatalf("pgtest: no database for tests: %v", err)
	}
	schema := "t_" + randomHex(6)
	admin, err := pgxpool.New(ctx, base)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	defer admin.Close()
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatalf("pgtest: creating schema %s: %v", schema, err)
	}
	u, err := WithSearchPath(base, schema)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		DropSchema(context.Background(), base, schema)
	})
	return &DB{Schema: schema, URL: u, Pool: pool}
}

// DropSchema removes a test schema and unschedules its pg_cron jobs.
func DropSchema(ctx context.Context, baseURL, schema string) {
	admin, err := pgxpool.New(ctx, baseURL)
	if err != nil {
		return
	}
	defer admin.Close()
	_, _ = admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE jobname LIKE '%-' || $1
		OR (database = current_database() AND command = format('CALL %I.purge_expired_idempotency_keys()', $1::text))`, schema)
	_, _ = admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+quoteIdent(schema)+" CASCADE")
}

// WithSearchPath returns rawURL with search_path set to schema (sent as a
// startup parameter, so no SET statement is needed).
func WithSearchPath(rawURL, schema string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("parsing database URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
