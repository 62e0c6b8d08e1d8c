package pgstore_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// TestGrantsForACustomSchema: a user that did not create the key store,
// in a schema of its own, in a database where PUBLIC may not execute the
// schema's functions, is refused (a permanent error) until Grants' three
// statements run, and then passes the whole conformance suite.
func TestGrantsForACustomSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.NewEmpty(t)
	schema := "keys_" + db.Schema
	role := "app_" + strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	t.Cleanup(func() {
		pgtest.DropSchema(context.Background(), base, schema)
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	_, err = pgstore.Migrate(ctx, db.Pool, &pgstore.MigrateOptions{Schema: schema, Cron: pgstore.CronOff})
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA "+schema+" FROM PUBLIC")
	require.NoError(t, err)

	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	appPool := newPool(t, u.String(), nil)
	store := must.Value(pgstore.New(appPool, &pgstore.Options{Schema: schema}))

	now := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: "o"}
	_, err = store.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
	require.True(t, idemstore.IsPermanent(err), "without the grants: a permanent refusal, got %v", err)

	for i, stmt := range pgstore.Grants(schema, role) {
		_, err := db.Pool.Exec(ctx, stmt)
		require.NoError(t, err, stmt)
		if i < 2 {
			_, err = store.Claim(ctx, idemstore.Claim{Ref: ref, Fingerprint: "h", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(time.Hour)})
			require.Error(t, err, "every statement is needed: refused after %d of 3", i+1)
		}
	}
	storetest.Run(t, storetest.Config{Parts: storetest.Contract, New: func(*testing.T) idemstore.Store { return store }})
}

// The README shows Grants' statements for schema idempotency and user app,
// exactly.
func TestReadmeShowsTheGrants(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join("..", "..", "..", "README.md"))
	require.NoError(t, err)
	for _, stmt := range pgstore.Grants("idempotency", "app") {
		require.Contains(t, string(readme), stmt+";\n", "README.md lacks the statement")
	}
}
