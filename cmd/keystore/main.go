// Command keystore creates or updates the idempotency key store (package
// pgstore's own migrations: the UNLOGGED table, the purge procedure, the
// functions the store calls, and the hourly pg_cron job) in one schema of a
// PostgreSQL database, without the sample app's tables.
//
// Usage:
//
//	go run github.com/ichido/ichido/cmd/keystore -database-url URL [-schema name] [-no-cron]
//
// -database-url defaults to $DATABASE_URL. -schema defaults to
// $IDEMPOTENCY_SCHEMA (as package storeenv reads it), else the connection's
// current schema (public unless the URL sets search_path).
// pg_cron is used where it lives: in this database when it is the one named
// by cron.database_name, else scheduled from that database with
// cron.schedule_in_database; when neither is possible nothing is applied and
// the message says what to do. -no-cron schedules nothing: call the purge,
// CALL <schema>.purge_expired_idempotency_keys(), hourly from a scheduler
// of your own; the command prints that statement, with the schema quoted
// where SQL needs it (a reserved word, upper case).
//
// -uninstall removes the key store and its job instead (every record is
// lost).
//
// For another migration tool (goose, tern, Atlas, Flyway), -sql DIR writes
// the very files Migrate applies into DIR, one per migration under its own
// name, and says how to schedule the purge; -sql - prints them all to
// standard output, that advice first as SQL comments. No database is needed
// for it:
//
//	go run github.com/ichido/ichido/cmd/keystore -sql db/migrations/idempotency
//
// # Records
//
// The get, list and delete commands find and clear records, on either
// store (see records.go for every flag):
//
//	keystore get    -sub 'auth0|6543210fedcba' -key 8e03978e-40d5-43e8-bc93-6894a57f9324
//	keystore get    -sub 'auth0|6543210fedcba' -key order-1/charge -key-format opaque -prefix orders
//	keystore get    -function task-activity -key <SQS message id>
//	keystore get    -function rpc -sub 'auth0|6543210fedcba' -key 8e03978e-40d5-43e8-bc93-6894a57f9324
//	keystore list   -status in_progress [-sub …] [-limit 100]
//	keystore delete -sub … -key … [-key-format opaque] [-prefix orders]
//	keystore user-id 'auth0|6543210fedcba'
//
// The store is the one the environment names, as a program's would be
// (package storeenv: IDEMPOTENCY_STORE, DATABASE_URL or the dbpool
// variables, REDIS_URL, IDEMPOTENCY_TABLE); -store, -database-url, -schema,
// -redis-url, -redis-prefix, -table and -dynamodb-prefix override it. A record is named as its request or call
// named it (-sub and -key, with -key-format and -prefix as the handler's
// Config has them; -function, -scope and -key for a Function or an
// SQSHandler; -function rpc, -sub and -key, with -issuer and -tenant, for
// a gRPC or Connect call), or by the ids the store keeps (-user,
// -record-key). keystore help lists the commands. -key is
// read as a UUID version 4 unless -key-format opaque says the handler's
// Config.KeyFormat is KeyOpaque.
//
// Records print as one JSON object per line: the ids the store keeps
// (user_id, key), status, owner, request_hash (the fingerprint),
// created_at (when the record was claimed), expires_at, and lease_until
// and lease_expired while in progress, response once completed, every
// time in RFC 3339, UTC (the stores keep no completion time). Beside them
// is what the flags named the record by: subject and issuer (-sub,
// -issuer: for a handler whose users are idempotency.IssuerSubject's
// pairs), function and
// scope (-function, -scope), key_prefix (-prefix), sent_key (-key, with
// get), and request_hash_of, what the fingerprint is a hash of:
// http_request (by default the method, path, query and body; what
// Config.Fingerprint picks when it is set) or function_payload (the
// function's name and FunctionConfig.Payload's result, or the name alone
// without one).
//
// user-id prints the user id the stores keep for a subject
// (idempotency.SubjectUUID): the one a record's user_id and the logs' user
// field show, so that an operator can tell whose they are (-issuer: the id
// of the pair idempotency.IssuerSubject makes):
//
//	keystore user-id 'auth0|6543210fedcba'
//	keystore user-id -issuer https://login.example.com/ 'auth0|6543210fedcba'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Getenv); err != nil {
		fmt.Fprintln(os.Stderr, "keystore:", err)
		stop()
		os.Exit(1)
	}
}

// usage lists the subcommands; keystore -h and keystore help print it.
const usage = `usage:
  keystore [-database-url URL] [-schema NAME] [-no-cron] [-uninstall]
                                 create or update the key store (pgstore.Migrate)
  keystore -sql DIR|-            write its migration files for another tool
  keystore get    -sub S -key K  print a record (a request's; -function NAME for a
                                 Function, -function rpc -sub S for a gRPC or Connect call)
  keystore list   [-sub S | -function NAME] [-status in_progress|completed]
  keystore delete -sub S -key K  delete a record (the same flags as get)
  keystore user-id [-issuer I] [-tenant T] SUBJECT
                                 print the user id the stores keep for a subject
  keystore help                  print this

The store is the one the environment names (IDEMPOTENCY_STORE, DATABASE_URL or
the dbpool variables, IDEMPOTENCY_SCHEMA, REDIS_URL, IDEMPOTENCY_TABLE).
keystore COMMAND -h lists a command's flags.
`

func run(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	if len(args) > 0 {
		switch args[0] {
		case "get", "list", "delete":
			return runRecords(ctx, args[0], args[1:], out, getenv)
		case "user-id":
			return runUserID(args[1:], out)
		case "help":
			fmt.Fprint(out, usage)
			return nil
		}
	}
	fs := flag.NewFlagSet("keystore", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage+"\nflags of the first form:\n")
		fs.PrintDefaults()
	}
	url := fs.String("database-url", getenv("DATABASE_URL"), "PostgreSQL URL (default $DATABASE_URL)")
	schema := fs.String("schema", getenv("IDEMPOTENCY_SCHEMA"), "schema of the key store (default $IDEMPOTENCY_SCHEMA, else the connection's current schema)")
	noCron := fs.Bool("no-cron", false, "schedule no pg_cron job; call the purge procedure from your own scheduler")
	uninstall := fs.Bool("uninstall", false, "remove the key store and its pg_cron job (every record is lost)")
	timeout := fs.Duration("timeout", time.Minute, "give up after this long")
	sqlDir := fs.String("sql", "", "write the key store's migration files into this folder for another migration tool (- prints them); touches no database")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q (keystore help lists the commands)", fs.Args())
	}
	if *sqlDir != "" {
		return writeSQL(*sqlDir, out)
	}
	if *url == "" {
		return errors.New("no database: pass -database-url or set DATABASE_URL")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	pool, err := pgxpool.New(ctx, *url)
	if err != nil {
		return err
	}
	defer pool.Close()
	opts := &pgstore.MigrateOptions{Schema: *schema}
	if *noCron {
		opts.Cron = pgstore.CronOff
	}
	if *uninstall {
		if err := pgstore.Uninstall(ctx, pool, opts); err != nil {
			return err
		}
		fmt.Fprintln(out, "removed the key store")
		return nil
	}
	res, err := pgstore.Migrate(ctx, pool, opts)
	if err != nil {
		return err
	}
	if len(res.Applied) == 0 {
		fmt.Fprintf(out, "schema %s: the key store is up to date\n", res.Schema)
	} else {
		for _, name := range res.Applied {
			fmt.Fprintf(out, "schema %s: applied %s\n", res.Schema, name)
		}
	}
	if res.Purge != nil {
		fmt.Fprintf(out, "purge: pg_cron job %q in database %s runs %s hourly in database %s\n", res.Purge.Name, res.Purge.CronDatabase, res.Purge.Command, res.Purge.Database)
	} else {
		fmt.Fprintf(out, "purge: not scheduled; call %s hourly from your own scheduler\n", res.PurgeCommand)
	}
	return nil
}
