package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// newPool opens a pool on url, closed at the end of the test; configure may
// change its settings first.
func newPool(t *testing.T, url string, configure func(*pgxpool.Config)) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	if configure != nil {
		configure(cfg)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// newBrokenStore returns a store whose pool points at a port nothing
// listens on.
func newBrokenStore(t *testing.T) idemstore.Store {
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	return must.Value(pgstore.New(newPool(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/ichido?sslmode=disable&connect_timeout=5", port), nil), nil))
}

// newMisconfiguredStore returns a store that logs in as a role of its own
// which may use the key store's schema but was granted nothing on its
// table: every call is refused with "permission denied" (42501).
func newMisconfiguredStore(t *testing.T) idemstore.Store {
	db := newDB(t)
	ctx := context.Background()
	role := "nogrant_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	_, err := db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "GRANT USAGE ON SCHEMA "+db.Schema+" TO "+role)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	return must.Value(pgstore.New(newPool(t, u.String(), nil), nil))
}

// tooLargeBody is the body the conformance suite's stores refuse: their
// largest record is set just below it.
const tooLargeBody = 2 << 20

func TestConformance(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
		return must.Value(pgstore.New(newDB(t).Pool, &pgstore.Options{MaxRecordBytes: tooLargeBody}))
	}, NewBrokenStore: newBrokenStore, NewMisconfiguredStore: newMisconfiguredStore, TooLargeBody: tooLargeBody})
}

// TestHTTPBehaviour runs the HTTP behaviour table (every payload shape and the
// net/http middleware) on the PostgreSQL store.
func TestHTTPBehaviour(t *testing.T) {
	t.Parallel()
	storetest.Run(t, storetest.Config{Parts: storetest.HTTP, New: func(t *testing.T) idemstore.Store {
		return must.Value(pgstore.New(newDB(t).Pool, nil))
	}})
}

// TestConformanceQueryExecModes runs the suite with the modes a
// transaction-pooling proxy needs (no named prepared statement outlives a
// transaction), and with the cached prepared statements of a direct
// connection.
func TestConformanceQueryExecModes(t *testing.T) {
	t.Parallel()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			db := newDB(t) // one schema for the mode: the suite's keys are random
			storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(t *testing.T) idemstore.Store {
				return must.Value(pgstore.New(newPool(t, db.URL, func(c *pgxpool.Config) {
					c.ConnConfig.DefaultQueryExecMode = mode
				}), nil))
			}})
		})
	}
}

// statementCounter is a pgx.QueryTracer that counts the statements sent.
// The check a Store in the prepared mode makes on a connection's first use
// (that it is not behind a pooler) belongs to the connection, not to the
// operation that happened to come first: it is counted apart, in checks.
type statementCounter struct{ n, checks atomic.Int64 }

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if d.SQL == "SELECT pg_backend_pid()" {
		c.checks.Add(1)
	} else {
		c.n.Add(1)
	}
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// take returns the count so far and starts again from zero.
func (c *statementCounter) take() int64 { return c.n.Swap(0) }

func TestRoundTrips(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	counter := &statementCounter{}
	st := must.Value(pgstore.New(newPool(t, db.URL, func(c *pgxpool.Config) { c.ConnConfig.Tracer = counter }), nil))
	ctx := context.Background()
	now := time.Now().Truncate(time.Millisecond)
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "first"}
	claim := idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)}

	res, err := st.Claim(ctx, claim)
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	require.LessOrEqual(t, counter.take(), int64(2), "a first request: claim and complete")

	claim.Owner = "retry"
	res, err = st.Claim(ctx, claim)
	require.NoError(t, err)
	require.False(t, res.Claimed)
	require.Equal(t, "{}", res.Record.Response.Body)
	require.Equal(t, int64(1), counter.take(), "a replay is one statement")

	claim.Ref = idemstore.Ref{UserID: ref.UserID, Key: uuid.NewString(), Owner: "failing"}
	_, err = st.Claim(ctx, claim)
	require.NoError(t, err)
	require.NoError(t, st.Release(ctx, claim.Ref))
	require.LessOrEqual(t, counter.take(), int64(2), "a failed request: claim and release")
	require.Equal(t, int64(1), counter.checks.Load(), "the pool's one connection was checked once, on its first use")
}

// TestEnvelopeKeepsBodyAsString checks the stored form: the body is a JSON
// string inside the JSONB envelope (never a parsed value that JSONB would
// normalise), and an unrepresentable body is marked base64.
func TestEnvelopeKeepsBodyAsString(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))
	ctx := context.Background()
	now := time.Now()
	for _, tc := range []struct {
		body, encoding string
	}{
		{body: `{"b": 1, "a": 2}`},
		{body: "nul\x00byte", encoding: "base64"},
		{body: "bad \xff utf8", encoding: "base64"},
	} {
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
		_, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Now: now, ExpiresAt: now.Add(time.Hour),
			Response: idemstore.Response{StatusCode: 200, Headers: map[string]string{"Content-Type": "text/plain"}, Body: tc.body}}))
		var typ, encoding, contentType string
		var status, statusCode int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT jsonb_typeof(response_body->'body'), coalesce(response_body->>'bodyEncoding', ''),
			response_body->'headers'->>'Content-Type', (response_body->>'status')::int, status_code
			FROM idempotency_keys WHERE user_id = $1 AND key = $2`, ref.UserID, ref.Key).Scan(&typ, &encoding, &contentType, &status, &statusCode))
		require.Equal(t, "string", typ)
		require.Equal(t, tc.encoding, encoding)
		require.Equal(t, "text/plain", contentType)
		require.Equal(t, 200, status)
		require.Equal(t, 200, statusCode)
	}
}

// TestTakeoverOfExpiredRows writes expired rows directly and checks that a
// claim replaces them in place.
func TestTakeoverOfExpiredRows(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	st := must.Value(pgstore.New(db.Pool, nil))
	ctx := context.Background()
	now := time.Now().Add(-time.Hour).Truncate(time.Millisecond).UTC() // in the past: see storetest
	user := uuid.NewString()
	completedKey, abandonedKey, liveKey := uuid.NewString(), uuid.NewString(), uuid.NewString()
	_, err := db.Pool.Exec(ctx, `INSERT INTO idempotency_keys
		(key, user_id, request_hash, status, response_body, status_code, owner, lease_expires_at, created_at, expires_at) VALUES
		($2, $1, 'old', 'completed', '{"status":200,"body":"old"}', 200, 'old-owner', NULL, $3::timestamptz - interval '2 days', $3::timestamptz - interval '1 second'),
		($4, $1, 'old', 'in_progress', NULL, NULL, 'old-owner', $3::timestamptz - interval '1 second', $3::timestamptz - interval '1 minute', $3::timestamptz + interval '1 day'),
		($5, $1, 'old', 'in_progress', NULL, NULL, 'old-owner', $3::timestamptz + interval '1 second', $3::timestamptz - interval '1 minute', $3::timestamptz + interval '1 day')`,
		user, completedKey, now, abandonedKey, liveKey)
	require.NoError(t, err)

	for key, wantClaimed := range map[string]bool{completedKey: true, abandonedKey: true, liveKey: false} {
		ref := idemstore.Ref{UserID: user, Key: key, Owner: "new-owner"}
		res, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "new", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		require.NoError(t, err)
		require.Equal(t, wantClaimed, res.Claimed, key)

		var owner, hash, status string
		var body *string
		var statusCode *int
		var leaseUntil *time.Time
		var createdAt, expiresAt time.Time
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT owner, request_hash, status, response_body::text, status_code, lease_expires_at, created_at, expires_at
			FROM idempotency_keys WHERE user_id = $1 AND key = $2`, user, key).Scan(&owner, &hash, &status, &body, &statusCode, &leaseUntil, &createdAt, &expiresAt))
		if !wantClaimed {
			require.Equal(t, "old-owner", owner)
			require.Equal(t, "old", hash)
			require.True(t, now.Add(time.Second).Equal(*leaseUntil))
			continue
		}
		require.Equal(t, "new-owner", owner)
		require.Equal(t, "new", hash)
		require.Equal(t, "in_progress", status)
		require.Nil(t, body)
		require.Nil(t, statusCode)
		require.True(t, now.Add(time.Minute).Equal(*leaseUntil))
		require.True(t, now.Equal(createdAt))
		require.True(t, now.Add(time.Hour).Equal(expiresAt))
	}
}

// TestSchemaOption: a Store configured with a schema keeps its records in
// that schema's table, whatever the connection's search_path, and a schema
// without the migrations gives a idemstore.Error that says what to do.
func TestSchemaOption(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	other := "Other_" + db.Schema // mixed case: the name must be quoted
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, `CREATE SCHEMA "`+other+`"`)
	require.NoError(t, err)
	t.Cleanup(func() { pgtest.DropSchema(context.Background(), base, other) })
	otherURL, err := pgtest.WithSearchPath(base, `"`+other+`"`)
	require.NoError(t, err)
	err = migrateStore(ctx, newPool(t, otherURL, nil))
	require.NoError(t, err)

	st := must.Value(pgstore.New(db.Pool, &pgstore.Options{Schema: other}))
	now := time.Now()
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
	res, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.NoError(t, err)
	require.True(t, res.Claimed)
	require.NoError(t, st.Complete(ctx, idemstore.Completion{Ref: ref, Response: idemstore.Response{StatusCode: 201, Body: "{}"}, Now: now, ExpiresAt: now.Add(time.Hour)}))
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM "`+other+`".idempotency_keys WHERE status = 'completed') * 10 + (SELECT count(*) FROM idempotency_keys)`).Scan(&n))
	require.Equal(t, 10, n, "the record is in the configured schema only")

	missing := must.Value(pgstore.New(db.Pool, &pgstore.Options{Schema: "no_such_schema"}))
	_, err = missing.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	var se *idemstore.Error
	require.ErrorAs(t, err, &se)
	require.Contains(t, err.Error(), "pgstore.Migrate")
}
