package pgstore

import "github.com/jackc/pgx/v5"

// Grants returns the statements that let role, the database user a
// program's pool logs in as, use the key store that Migrate created in
// schema ("" means public), when that user is not the one that ran Migrate
// (the migration user and the app user):
//
//	GRANT USAGE ON SCHEMA "idempotency" TO "app";
//	GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "idempotency"."idempotency_keys" TO "app";
//	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "idempotency" TO "app";
//
// USAGE lets the user name the schema's objects; the functions the store
// calls run as their caller, so the user needs the table's rows (SELECT
// also serves the Admin methods, and so Config.OnReplay's times); EXECUTE
// is PUBLIC's by default, but a database that revoked it from PUBLIC needs
// the third statement, and then again after a migration that adds a
// function. The purge runs as the pg_cron job's owner, not as role, and
// needs nothing here. Names are quoted as PostgreSQL needs them; run the
// statements as the schema's owner (the user that ran Migrate).
func Grants(schema, role string) []string {
	if schema == "" {
		schema = "public"
	}
	s, r := pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize()
	return []string{
		"GRANT USAGE ON SCHEMA " + s + " TO " + r,
		"GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE " + pgx.Identifier{schema, "idempotency_keys"}.Sanitize() + " TO " + r,
		"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA " + s + " TO " + r,
	}
}
