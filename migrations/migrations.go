// Package migrations embeds the project's numbered SQL migrations, so that
// the tests, the make targets and the migrate function apply the very same
// files. Apply them with package migrate.
package migrations

import "embed"

// FS holds the migration files, NNNNN_name.sql in goose's format.
//
//go:embed *.sql
var FS embed.FS
