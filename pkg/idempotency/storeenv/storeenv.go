// Package storeenv builds the idempotency store that the environment
// names, in one call, so that a program switches between PostgreSQL, Redis
// and DynamoDB by configuration alone:
//
//	store, closeStore, err := storeenv.Open(ctx, os.Getenv, nil)
//	if err != nil {
//		return err // names every variable at fault
//	}
//	defer closeStore()
//	h, err := idempotency.Wrap(createOrder, idempotency.Config{Store: store})
//
// The variables:
//
//	IDEMPOTENCY_STORE  postgres (the default when unset), redis or dynamodb
//	REDIS_URL          with redis: the server (redisstore.ClientFromEnv:
//	                   rediss:// with a verified certificate; plain redis://
//	                   only for a loopback host). Must be unset otherwise,
//	                   so that a deployment never believes it uses Redis
//	                   when it does not.
//	IDEMPOTENCY_TABLE  with dynamodb: the table (package dynamostore). Must be
//	                   unset otherwise, for the same reason.
//	AWS_REGION         with dynamodb: the table's region (Lambda sets it).
//	                   The credentials and AWS_ENDPOINT_URL_DYNAMODB (another
//	                   endpoint, such as a local server) are the AWS SDK's
//	                   own settings, which it reads from the process.
//	IDEMPOTENCY_SCHEMA with postgres: the key store's schema
//	                   (pgstore.Options.Schema), when Options.Postgres
//	                   names none; unset, the connection's search_path.
//	DB_AUTH, …         with postgres and no Options.Pool: the database
//	                   (dbpool.ConfigFromEnv: DB_AUTH=url and DATABASE_URL,
//	                   or DB_AUTH=iam and DB_HOST, DB_PORT, DB_NAME,
//	                   DB_USER, AWS_REGION for RDS Proxy with IAM)
//
// The key store's own tables must exist: pgstore.Migrate (or the module's
// operations command) creates them; Redis needs nothing; the DynamoDB table
// must exist too (dynamostore's CreateTableInput describes it).
package storeenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// EnvStore is the variable that names the store.
const EnvStore = "IDEMPOTENCY_STORE"

// The stores EnvStore names.
const (
	// Postgres is package pgstore, the default.
	Postgres = "postgres"
	// Redis is package redisstore.
	Redis = "redis"
	// DynamoDB is package dynamostore.
	DynamoDB = "dynamodb"
)

// EnvTable is the variable that names the DynamoDB table.
const EnvTable = "IDEMPOTENCY_TABLE"

// EnvSchema is the variable that names the PostgreSQL key store's schema.
const EnvSchema = "IDEMPOTENCY_SCHEMA"

// postgresOptions returns opts with the schema the environment names, when
// opts names none.
func postgresOptions(getenv func(string) string, opts *pgstore.Options) *pgstore.Options {
	schema := strings.TrimSpace(getenv(EnvSchema))
	if schema == "" || (opts != nil && opts.Schema != "") {
		return opts
	}
	o := pgstore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Schema = schema
	return &o
}

// ErrEnv is matched (errors.Is) by every error Kind and Open return for the
// environment: a variable is missing, malformed or contradicts another.
// Such an error wraps each *Error, and each *dbpool.ConfigError of the
// database variables, so errors.As finds them. Nothing was connected.
var ErrEnv = errors.New("storeenv: invalid idempotency store settings")

// Error names the variable at fault and says what to do. It matches ErrEnv.
type Error struct {
	// Variable is the environment variable, e.g. "IDEMPOTENCY_STORE".
	Variable string
	// Problem says what is wrong with it.
	Problem string
}

func (e *Error) Error() string { return fmt.Sprintf("storeenv: %s: %s", e.Variable, e.Problem) }

// Is reports whether target is ErrEnv.
func (e *Error) Is(target error) bool { return target == ErrEnv }

// Options adds what the environment does not say. A nil *Options means all
// defaults.
type Options struct {
	// Pool, when set, is the PostgreSQL pool a postgres store keeps its records
	// through. The database variables are then not read. A program that already
	// has a pool for its own tables passes it, as an application does. The
	// close function leaves it open. Defaults to nil: Open builds a pool from
	// the environment (dbpool.ConfigFromEnv, dbpool.Open) and the close
	// function closes it.
	Pool *pgxpool.Pool
	// Postgres configures a postgres store (the schema of the key store).
	// Defaults to nil: pgstore's defaults, with IDEMPOTENCY_SCHEMA's
	// schema when it is set.
	Postgres *pgstore.Options
	// Redis configures a redis store (its key prefix). Defaults to nil:
	// redisstore's defaults.
	Redis *redisstore.Options
	// DynamoDB configures a dynamodb store (attribute names, key prefix);
	// its Table is IDEMPOTENCY_TABLE's, whatever it says. Defaults to nil:
	// dynamostore's defaults.
	DynamoDB *dynamostore.Options
}

// Kind returns the store the environment names, Postgres, Redis or
// DynamoDB, after checking IDEMPOTENCY_STORE, REDIS_URL, IDEMPOTENCY_TABLE
// and, with DynamoDB, AWS_REGION against each other. Errors match ErrEnv
// and name every variable at fault.
func Kind(getenv func(string) string) (string, error) {
	var errs []error
	kind := Postgres
	switch s := strings.TrimSpace(getenv(EnvStore)); s {
	case "", Postgres:
	case Redis, DynamoDB:
		kind = s
	default:
		errs = append(errs, &Error{EnvStore, fmt.Sprintf("is %q: use %s, %s or %s (or leave it unset for %s)", s, Postgres, Redis, DynamoDB, Postgres)})
	}
	redisURL := strings.TrimSpace(getenv(redisstore.EnvURL))
	switch {
	case kind == Redis && redisURL == "":
		errs = append(errs, &Error{redisstore.EnvURL, "is empty but " + EnvStore + "=redis: set it to rediss://host:port (ElastiCache, Valkey), or redis://127.0.0.1:port for a local server"})
	case kind != Redis && redisURL != "" && len(errs) == 0:
		errs = append(errs, &Error{redisstore.EnvURL, "is set but " + EnvStore + " is " + kind + ": set " + EnvStore + "=redis to use Redis, or unset " + redisstore.EnvURL})
	}
	table := strings.TrimSpace(getenv(EnvTable))
	switch {
	case kind == DynamoDB && table == "":
		errs = append(errs, &Error{EnvTable, "is empty but " + EnvStore + "=dynamodb: set it to the DynamoDB table's name (the stack's IdempotencyTableName output)"})
	case kind == DynamoDB && strings.TrimSpace(getenv("AWS_REGION")) == "":
		errs = append(errs, &Error{"AWS_REGION", "is empty but " + EnvStore + "=dynamodb: set the table's region, such as eu-west-1 (Lambda sets it)"})
	case kind != DynamoDB && table != "" && len(errs) == 0:
		errs = append(errs, &Error{EnvTable, "is set but " + EnvStore + " is " + kind + ": set " + EnvStore + "=dynamodb to use DynamoDB, or unset " + EnvTable})
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("%w: %w", ErrEnv, errors.Join(errs...))
	}
	return kind, nil
}

// Open builds the store the environment names, read through getenv (os.Getenv
// in a main). It returns the store with the function that closes what Open
// opened, which is safe to call more than once. A postgres store's own pool
// connects once (dbpool.New), so that a wrong setting fails here. A redis store
// connects on its first command. A dynamodb store connects on its first call,
// with the AWS SDK's default credentials (the function's role on Lambda).
// Errors for the environment match ErrEnv (and, for the database variables,
// dbpool.ErrConfig); a database that cannot be reached gives dbpool's error.
func Open(ctx context.Context, getenv func(string) string, opts *Options) (idemstore.Store, func(), error) {
	if opts == nil {
		opts = &Options{}
	}
	kind, err := Kind(getenv)
	if err != nil {
		return nil, nil, err
	}
	switch kind {
	case Redis:
		client, err := redisstore.ClientFromEnv(getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrEnv, err)
		}
		store, err := redisstore.New(client, opts.Redis)
		if err != nil {
			return nil, nil, fmt.Errorf("storeenv: %w", err)
		}
		return store, closeOnce(func() { _ = client.Close() }), nil
	case DynamoDB:
		return openDynamoDB(ctx, getenv, opts.DynamoDB)
	}
	pgOpts := postgresOptions(getenv, opts.Postgres)
	if opts.Pool != nil {
		store, err := pgstore.New(opts.Pool, pgOpts)
		if err != nil {
			return nil, nil, fmt.Errorf("storeenv: %w", err)
		}
		return store, func() {}, nil
	}
	cfg, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEnv, err)
	}
	pool, err := dbpool.New(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("storeenv: %w", err)
	}
	store, err := pgstore.New(pool, pgOpts)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("storeenv: %w", err)
	}
	return store, closeOnce(pool.Close), nil
}

func closeOnce(f func()) func() {
	done := false
	return func() {
		if !done {
			done = true
			f()
		}
	}
}

// openDynamoDB builds the dynamodb store on IDEMPOTENCY_TABLE in AWS_REGION.
func openDynamoDB(ctx context.Context, getenv func(string) string, opts *dynamostore.Options) (idemstore.Store, func(), error) {
	cfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(strings.TrimSpace(getenv("AWS_REGION"))))
	if err != nil {
		return nil, nil, fmt.Errorf("storeenv: the AWS SDK's settings for DynamoDB: %w", err)
	}
	o := dynamostore.Options{}
	if opts != nil {
		o = *opts
	}
	o.Table = strings.TrimSpace(getenv(EnvTable))
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), &o)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEnv, err)
	}
	return store, func() {}, nil
}
