package pgstore

import "github.com/jackc/pgx/v5"

// Grants returns the statements that let role use the key store that Migrate
// created in schema ("" means public). Role is the database user a program's
// pool logs in as. It needs them when it is not the user that ran Migrate (the
// migration user and the app user):
//
//	GRANT USAGE ON SCHEMA "idempotency" TO "app";
//	GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE "idempotency"."idempotency_keys" TO "app";
//	GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA "idempotency" TO "app";
//
// USAGE lets the user name the schema's objects. The functions the store calls
// run as their caller, so the user needs the table's rows. SELECT also serves
// the Admin methods, and so Config.OnReplay's times. EXECUTE is PUBLIC's by
// default. A database that revoked it from PUBLIC needs the third statement,
// and again after a migration that adds a function. The purge runs as the
// pg_cron job's owner, not as role, and needs nothing here. Names are quoted as
// PostgreSQL needs them; run the statements as the schema's owner (the user
// that ran Migrate).
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

// CronGrants returns the statements that let role, the database user that runs
// Migrate, schedule the purge. They are needed when pg_cron keeps its jobs
// (cron.database_name) in another database than the key store. Here they are
// for user migrator:
//
//	GRANT pg_read_all_settings TO "migrator";
//	GRANT USAGE ON SCHEMA cron TO "migrator";
//	GRANT EXECUTE ON FUNCTION cron.schedule_in_database(text, text, text, text, text, boolean) TO "migrator";
//
// The first lets the user read cron.database_name, to find that database. The
// other two run in that database, as a superuser or as the user that created
// pg_cron. On Aurora that is the master user, a member of rds_superuser. USAGE
// on schema cron alone is not enough: pg_cron 1.4 and later revoke EXECUTE on
// cron.schedule_in_database from PUBLIC, for its owner to grant. pg_cron then
// checks that the user may CONNECT to the key store's database, which PUBLIC
// may unless that was revoked; the job runs as the user. Where the key store is
// in the cron database itself, USAGE on schema cron is all pg_cron asks
// (cron.schedule is PUBLIC's).
func CronGrants(role string) []string {
	r := pgx.Identifier{role}.Sanitize()
	return []string{
		"GRANT pg_read_all_settings TO " + r,
		"GRANT USAGE ON SCHEMA cron TO " + r,
		"GRANT EXECUTE ON FUNCTION cron.schedule_in_database(text, text, text, text, text, boolean) TO " + r,
	}
}
