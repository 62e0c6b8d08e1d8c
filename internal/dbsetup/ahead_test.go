package dbsetup_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/dbsetup"
)

// TestApplyOnANewerDatabase: when the database holds a migration newer
// than any this code has (of the app's set or of the key store's), as
// when an update rolls back to the earlier function after the newer one
// migrated, the setup succeeds and changes nothing.
func TestApplyOnANewerDatabase(t *testing.T) {
	ctx := context.Background()
	a := aurora16(t)
	sum, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Empty(t, sum.Ahead)
	owner := pool(t, a.URLAs(cfg.MigrateUser))

	// The newer code's migration 99 created a table the app user may not
	// use yet under this code's rule.
	_, err = owner.Exec(ctx, `CREATE TABLE later (id int); INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, true)`)
	require.NoError(t, err)
	newer, err := dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Contains(t, newer.Ahead, "the app's migrations are at 99")
	require.Equal(t, int64(99), newer.Version)
	require.Empty(t, newer.Applied)
	require.Empty(t, newer.Granted, "nothing granted")
	require.Nil(t, newer.Cron, "nothing probed")
	var granted bool
	require.NoError(t, owner.QueryRow(ctx, `SELECT has_table_privilege($1, 'later', 'SELECT')`, cfg.AppUser).Scan(&granted))
	require.False(t, granted)

	_, err = owner.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = 99; INSERT INTO idempotency_store_version (version, name) VALUES (99, '0099_later.sql')`)
	require.NoError(t, err)
	newer, err = dbsetup.Apply(ctx, connector(t, a.Cluster), cfg)
	require.NoError(t, err)
	require.Contains(t, newer.Ahead, "the key store's migrations are at 99")
}
