package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// TestPoolerStatementErrorsArePermanent provokes, on a real server, the two
// errors that pgx's statement cache meets behind a transaction-pooling
// proxy, which moves a client from one server connection to another
// between transactions: 26000 (the statement the client prepared is not
// on this connection) and 42P05 (another client's statement of the same
// name is). Each is made the way the proxy makes it, on a pool of one
// connection: the server's statements are dropped under the cache, or one
// of the cache's name is there first. Both are one misconfiguration and
// answer as one: a permanent store error that names the query exec mode.
func TestPoolerStatementErrorsArePermanent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := newDB(t)
	cached := func() (*pgxpool.Pool, *pgstore.Store) {
		pool := newPool(t, db.URL, func(c *pgxpool.Config) {
			c.MaxConns = 1
			c.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
		})
		return pool, must.Value(pgstore.New(pool, nil))
	}
	claim := func(st *pgstore.Store) error {
		now := time.Now()
		ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
		_, err := st.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
		return err
	}

	// The first claim prepares the claim statement under the cache's name.
	pool, st := cached()
	require.NoError(t, claim(st))
	var name string
	require.NoError(t, pool.QueryRow(ctx, `SELECT name FROM pg_prepared_statements WHERE statement LIKE '%idempotency_key_claim%'`,
		pgx.QueryExecModeSimpleProtocol).Scan(&name))

	// 26000: the connection no longer has the statement the cache holds.
	_, err := pool.Exec(ctx, "DEALLOCATE ALL")
	require.NoError(t, err)
	missing := claim(st)

	// 42P05: the connection already has a statement of the cache's name.
	other, otherStore := cached()
	_, err = other.Exec(ctx, "PREPARE "+pgx.Identifier{name}.Sanitize()+" AS SELECT 1")
	require.NoError(t, err)
	duplicate := claim(otherStore)

	for code, err := range map[string]error{pgerrcode.InvalidSQLStatementName: missing, pgerrcode.DuplicatePreparedStatement: duplicate} {
		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr, "SQLSTATE %s", code)
		require.Equal(t, code, pgErr.Code)
		var se *idemstore.Error
		require.True(t, errors.As(err, &se), "%v", err)
		require.Equal(t, "claim", se.Op)
		require.True(t, se.Permanent, "SQLSTATE %s must be permanent: %v", code, err)
		require.ErrorContains(t, err, "QueryExecModeExec", "SQLSTATE %s", code)
	}
}
