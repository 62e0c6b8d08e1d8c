package main

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// writeSQL gives the key store's migrations, as pgstore embeds and Migrate
// applies them, to a user of another migration tool: each file written into
// dir under its own name, then the names and what to do about the purge
// (which the files do not schedule) on out; or, when dir is "-", that advice
// as SQL comments and then every file in order, each after a comment that
// names it, on out.
func writeSQL(dir string, out io.Writer) error {
	names, err := fs.Glob(pgstore.Migrations(), "*.sql")
	if err != nil {
		return err
	}
	if dir == "-" {
		for _, line := range strings.SplitAfter(strings.TrimSuffix(sqlNote, "\n"), "\n") {
			if _, err := io.WriteString(out, "-- "+strings.TrimPrefix(line, "-- ")); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(out, "\n\n"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, name := range names { // fs.Glob sorts, and the names are numbered
		sql, err := fs.ReadFile(pgstore.Migrations(), name)
		if err != nil {
			return err
		}
		if dir == "-" {
			if _, err := fmt.Fprintf(out, "-- keystore: %s\n%s\n", name, sql); err != nil {
				return err
			}
			continue
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, sql, 0o644); err != nil {
			return err
		}
		fmt.Fprintf(out, "wrote %s\n", path)
	}
	if dir != "-" {
		fmt.Fprint(out, sqlNote)
	}
	return nil
}

// sqlNote is what a user of another migration tool must know besides the
// files.
const sqlNote = `These are the key store's migrations, in order. Apply them with your own tool,
after setting search_path to the schema you pass as pgstore.Options.Schema (each creates
its objects in the current schema); never edit one that is applied: later versions add
files with the next numbers. The "-- +goose" lines are comments to every tool but goose.
The files do not schedule the purge of expired keys: call, hourly (with <schema> written as
an SQL identifier, in double quotes when it is not all lower case or is a keyword),
  CALL <schema>.purge_expired_idempotency_keys();
from a scheduler of your own, or schedule it with pg_cron in the database named by
cron.database_name:
  SELECT cron.schedule('purge-idempotency', '0 * * * *', 'CALL <schema>.purge_expired_idempotency_keys()');
  -- for another database of the cluster, from the cron database, as a user granted EXECUTE
  -- on cron.schedule_in_database besides USAGE on schema cron (pgstore.CronGrants):
  SELECT cron.schedule_in_database('purge-idempotency-<db>', '0 * * * *', 'CALL <schema>.purge_expired_idempotency_keys()', '<db>');
`
