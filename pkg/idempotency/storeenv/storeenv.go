// Package storeenv builds the idempotency store that the environment
// names, in one call, so that a program switches between PostgreSQL and
// Redis by configuration alone, as the sample task API does:
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
//	IDEMPOTENCY_STORE  postgres (the default when unset) or redis
//	REDIS_URL          with redis: the server (redisstore.ClientFromEnv:
//	                   rediss:// with a verified certificate; plain redis://
//	                   only for a loopback host). Must be unset with postgres,
//	                   so that a deployment never believes it uses Redis
//	                   when it does not.
//	DB_AUTH, …         with postgres and no Options.Pool: the database
//	                   (dbpool.ConfigFromEnv: DB_AUTH=url and DATABASE_URL,
//	                   or DB_AUTH=iam and DB_HOST, DB_PORT, DB_NAME,
//	                   DB_USER, AWS_REGION for RDS Proxy with IAM)
//
// The key store's own tables must exist: pgstore.Migrate (or cmd/keystore)
// creates them; Redis needs nothing.
package storeenv

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
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
)

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
	// Pool, when set, is the PostgreSQL pool a postgres store keeps its
	// records through, and the database variables are not read: a program
	// that already has a pool for its own tables passes it (the sample app
	// does), and the close function leaves it open. Defaults to nil: Open
	// builds a pool from the environment (dbpool.ConfigFromEnv, dbpool.Open)
	// and the close function closes it.
	Pool *pgxpool.Pool
	// Postgres configures a postgres store (the schema of the key store).
	// Defaults to nil: pgstore's defaults.
	Postgres *pgstore.Options
	// Redis configures a redis store (its key prefix). Defaults to nil:
	// redisstore's defaults.
	Redis *redisstore.Options
}

// Kind returns the store the environment names, Postgres or Redis, after
// checking IDEMPOTENCY_STORE and REDIS_URL against each other. Errors match
// ErrEnv and name every variable at fault.
func Kind(getenv func(string) string) (string, error) {
	var errs []error
	kind := Postgres
	switch s := strings.TrimSpace(getenv(EnvStore)); s {
	case "", Postgres:
	case Redis:
		kind = Redis
	default:
		errs = append(errs, &Error{EnvStore, fmt.Sprintf("is %q: use %s or %s (or leave it unset for %s)", s, Postgres, Redis, Postgres)})
	}
	redisURL := strings.TrimSpace(getenv(redisstore.EnvURL))
	switch {
	case kind == Redis && redisURL == "":
		errs = append(errs, &Error{redisstore.EnvURL, "is empty but " + EnvStore + "=redis: set it to rediss://host:port (ElastiCache, Valkey), or redis://127.0.0.1:port for a local server"})
	case kind == Postgres && redisURL != "" && len(errs) == 0:
		errs = append(errs, &Error{redisstore.EnvURL, "is set but " + EnvStore + " is postgres: set " + EnvStore + "=redis to use Redis, or unset " + redisstore.EnvURL})
	}
	if len(errs) > 0 {
		return "", fmt.Errorf("%w: %w", ErrEnv, errors.Join(errs...))
	}
	return kind, nil
}

// Open builds the store the environment names, read through getenv
// (os.Getenv in a main), and returns it with the function that closes what
// Open opened (safe to call more than once). A postgres store's own pool
// connects once (dbpool.New), so that a wrong setting fails here; a redis
// store connects on its first command. Errors for the environment match ErrEnv (and, for the
// database variables, dbpool.ErrConfig); a database that cannot be reached
// gives dbpool's error.
func Open(ctx context.Context, getenv func(string) string, opts *Options) (idempotency.Store, func(), error) {
	if opts == nil {
		opts = &Options{}
	}
	kind, err := Kind(getenv)
	if err != nil {
		return nil, nil, err
	}
	if kind == Redis {
		client, err := redisstore.ClientFromEnv(getenv)
		if err != nil {
			return nil, nil, fmt.Errorf("%w: %w", ErrEnv, err)
		}
		return redisstore.New(client, opts.Redis), closeOnce(func() { _ = client.Close() }), nil
	}
	if opts.Pool != nil {
		return pgstore.New(opts.Pool, opts.Postgres), func() {}, nil
	}
	cfg, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrEnv, err)
	}
	pool, err := dbpool.New(ctx, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("storeenv: %w", err)
	}
	return pgstore.New(pool, opts.Postgres), closeOnce(pool.Close), nil
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
