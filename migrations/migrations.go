// Package migrations embeds the sample app's numbered SQL migrations (the
// tasks table), so that the tests, the make targets and the migrate function
// apply the very same files. Apply them with package migrate, which applies
// the idempotency key store's own migrations (package pgstore) first; those
// live in package pgstore alone (cmd/keystore -sql writes them out for other
// migration tools) and are not part of this set.
package migrations

import "embed"

// FS holds the migration files, NNNNN_name.sql in goose's format.
//
//go:embed *.sql
var FS embed.FS
