package dbsetup

import (
	"context"
	"fmt"
	"io/fs"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/migrations"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// ahead says whether the database has a migration newer than any this code
// holds, of either set (the app's, the key store's), and which: the code
// is older than the database, as when a failed update rolls back to the
// previous version of the function after the newer one migrated. Such a
// setup changes nothing (migrations only go forward, and the newer code's
// setup already ran) and succeeds, so that the rollback can finish.
func ahead(ctx context.Context, owner *pgxpool.Pool) (string, error) {
	var why []string
	db, err := migrate.Version(ctx, owner)
	if err != nil {
		return "", step("reading the migration version", err)
	}
	if known := newest(migrations.FS, "."); db > known {
		why = append(why, fmt.Sprintf("the app's migrations are at %d, this code's newest is %d", db, known))
	}
	var store int64
	var exists bool
	err = owner.QueryRow(ctx, `SELECT to_regclass('idempotency_store_version') IS NOT NULL`).Scan(&exists)
	if err == nil && exists {
		err = owner.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM idempotency_store_version`).Scan(&store)
	}
	if err != nil {
		return "", step("reading the key store's migration version", err)
	}
	if known := newest(pgstore.Migrations(), "."); store > known {
		why = append(why, fmt.Sprintf("the key store's migrations are at %d, this code's newest is %d", store, known))
	}
	return strings.Join(why, "; "), nil
}

// newest is the highest number an .sql file's name starts with in dir.
func newest(fsys fs.FS, dir string) int64 {
	entries, _ := fs.ReadDir(fsys, dir)
	var top int64
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		n, _, _ := strings.Cut(name, "_")
		if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > top {
			top = v
		}
	}
	return top
}
