// Package taskfn builds the sample task API's Lambda functions from the
// environment, once per execution environment: one database pool
// (package dbpool), one idempotency store (PostgreSQL, Redis or DynamoDB), the task
// service, and its handlers, the mutating ones (POST, PATCH, DELETE) wrapped
// by idempotency.Wrap.
//
// The Lambda mains under functions/ and the local API server both use it,
// so what runs locally is what deploys. Each main is wiring only:
//
//	fns, err := taskfn.Build(ctx, os.Getenv)
//	if err != nil {
//		return err
//	}
//	defer fns.Close()
//	h, _ := fns.Handler(taskfn.CreateTaskFunction)
//	lambda.Start(h)
//
// The environment variables read are those of dbpool.ConfigFromEnv and
// IDEMPOTENCY_STORE, REDIS_URL, IDEMPOTENCY_TABLE (with AWS_REGION),
// IDEMPOTENCY_TTL and LOG_LEVEL; see Build.
package taskfn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

// The SAM logical ids of the functions (template.yaml). Handler knows the
// first five; MigrateFunction is served by NewMigrator and Migrate.
const (
	CreateTaskFunction = "CreateTaskFunction"
	ListTasksFunction  = "ListTasksFunction"
	GetTaskFunction    = "GetTaskFunction"
	UpdateTaskFunction = "UpdateTaskFunction"
	DeleteTaskFunction = "DeleteTaskFunction"
	MigrateFunction    = "MigrateFunction"
)

// Handler is an API Gateway HTTP API (payload format 2.0) Lambda handler.
type Handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// Functions holds the handlers of the task API and what they share. Build
// makes one; Close releases it.
type Functions struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	handlers map[string]Handler
	closers  []func()
	// What the activity function and the net/http server build on.
	store    idemstore.Store
	api      *tasks.API
	ttl      time.Duration
	metrics  io.Writer
	observer observe.Observer
	once     sync.Once
}

// Options are what a program that builds the functions sets beyond the
// environment. A nil *Options means all defaults, which is what the
// deployed functions use.
type Options struct {
	// Observer gets a span of every protected call, in every shape the
	// functions serve (idempotency.Settings.Observer): otelidem.New's, for
	// OpenTelemetry. Defaults to nil: no spans, only the log and EMF lines.
	Observer observe.Observer
}

// Build reads the environment through getenv (os.Getenv in a main) once and
// builds the functions:
//
//   - the database pool from dbpool.ConfigFromEnv (DB_AUTH and the variables
//     of its mode, DB_MAX_CONNS), connected once so that a wrong setting fails
//     at cold start;
//   - the idempotency store, by storeenv.Open: IDEMPOTENCY_STORE=postgres
//     (the default) keeps keys in the same database through the same pool;
//     redis keeps them in Redis or Valkey at REDIS_URL
//     (redisstore.ClientFromEnv: rediss:// with a verified certificate;
//     plain redis:// only for a loopback host), connected on first use;
//     dynamodb keeps them in the DynamoDB table IDEMPOTENCY_TABLE in
//     AWS_REGION through the function's role (AWS_ENDPOINT_URL_DYNAMODB,
//     which the AWS SDK reads, points it at a local server);
//   - IDEMPOTENCY_TTL, how long a key is remembered (default 24h);
//   - the store is checked once (idempotency.CheckStore): one that refuses
//     the function's calls for good (a missing grant or migration) fails
//     the cold start, one that cannot be reached yet is logged;
//   - LOG_LEVEL (debug, info, warn, error; default info) for the JSON log
//     lines written to standard output.
//
// A setting that is missing, malformed or contradicts another gives an
// error matching ErrConfig that names every variable at fault.
func Build(ctx context.Context, getenv func(string) string) (*Functions, error) {
	return buildWith(ctx, getenv, os.Stdout, nil)
}

// BuildWith is Build with opts (nil: Build's defaults).
func BuildWith(ctx context.Context, getenv func(string) string, opts *Options) (*Functions, error) {
	return buildWith(ctx, getenv, os.Stdout, opts)
}

func build(ctx context.Context, getenv func(string) string, out io.Writer) (*Functions, error) {
	return buildWith(ctx, getenv, out, nil)
}

func buildWith(ctx context.Context, getenv func(string) string, out io.Writer, with *Options) (*Functions, error) {
	cfg, err := readConfig(getenv)
	if err != nil {
		return nil, err
	}
	var o Options
	if with != nil {
		o = *with
	}
	logger := slog.New(slog.NewJSONHandler(out, &slog.HandlerOptions{Level: cfg.logLevel}))

	f := &Functions{logger: logger, observer: o.Observer}
	var store idemstore.Store
	if cfg.store == StoreRedis || cfg.store == StoreDynamoDB {
		// Before the database, so that a wrong REDIS_URL or table fails
		// without connecting anywhere.
		st, closeStore, err := storeenv.Open(ctx, getenv, nil)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		f.closers = append(f.closers, closeStore)
		store = st
	}

	pool, err := dbpool.Open(ctx, cfg.db)
	reachable := err == nil
	if errors.Is(err, dbpool.ErrUnreachable) && cfg.db.Auth == dbpool.AuthIAM {
		// Deployed, a database that does not answer yet (an Aurora cluster
		// resuming from auto-pause) gets requests a fast 503, not a failed
		// cold start; each request tries again within DB_CONNECT_TIMEOUT.
		logger.Warn("the database cannot be reached yet; requests are answered 503 until it can", "error", err)
		err = nil
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		f.Close()
		return nil, fmt.Errorf("taskfn: %w", err)
	}
	f.pool = pool
	f.closers = append(f.closers, pool.Close)
	if store == nil {
		// The keys live in the same database, through the same pool.
		if store, _, err = storeenv.Open(ctx, getenv, &storeenv.Options{Pool: pool}); err != nil {
			f.Close()
			return nil, fmt.Errorf("taskfn: %w", err)
		}
	}
	if reachable || cfg.store == StoreRedis {
		if err := checkStore(ctx, store, logger); err != nil {
			f.Close()
			return nil, err
		}
	}

	opts := &tasks.Options{Logger: logger}
	if keys, ok := store.(tasks.KeyCompleter); ok {
		// PostgreSQL: the create completes its key in the batch that
		// inserts the task.
		opts.Keys = keys
	}
	api := tasks.NewAPI(tasks.NewService(pool), opts)
	f.store, f.api, f.ttl, f.metrics = store, api, cfg.ttl, out
	protect := func(h Handler) (Handler, error) {
		return idempotency.Wrap(h, idempotency.Config{
			Store: store,
			Settings: idempotency.Settings{
				TTL:      cfg.ttl,
				Logger:   logger,
				Metrics:  out,
				Observer: o.Observer,
			},
		})
	}
	create, err1 := protect(api.Create)
	update, err2 := protect(api.Update)
	remove, err3 := protect(api.Delete)
	if err := errors.Join(err1, err2, err3); err != nil {
		f.Close()
		return nil, fmt.Errorf("taskfn: %w", err)
	}
	f.handlers = map[string]Handler{
		CreateTaskFunction: create,
		ListTasksFunction:  api.List,
		GetTaskFunction:    api.Get,
		UpdateTaskFunction: update,
		DeleteTaskFunction: remove,
	}
	return f, nil
}

// Handler returns the handler of the function with the SAM logical id
// logicalID (CreateTaskFunction, ListTasksFunction, GetTaskFunction,
// UpdateTaskFunction or DeleteTaskFunction); ok is false for any other id.
func (f *Functions) Handler(logicalID string) (h Handler, ok bool) {
	h, ok = f.handlers[logicalID]
	return h, ok
}

// LogicalIDs returns the logical ids that Handler knows, in a fixed order.
func LogicalIDs() []string {
	return []string{CreateTaskFunction, ListTasksFunction, GetTaskFunction, UpdateTaskFunction, DeleteTaskFunction}
}

// Logger returns the JSON logger the functions write to, at LOG_LEVEL.
func (f *Functions) Logger() *slog.Logger { return f.logger }

// Pool returns the database pool the functions share.
func (f *Functions) Pool() *pgxpool.Pool { return f.pool }

// Close closes the pool and the store's connections. It is safe to call
// more than once.
func (f *Functions) Close() {
	f.once.Do(func() {
		for i := len(f.closers) - 1; i >= 0; i-- {
			f.closers[i]()
		}
	})
}

// storeCheckTimeout bounds the key store's check at cold start.
const storeCheckTimeout = 3 * time.Second

// checkStore runs idempotency.CheckStore at cold start: a store that
// refuses its calls for good (a missing grant or migration, a wrong
// password) fails the cold start with the store's own message, so that the
// deployment shows it before a client gets a 500; one that cannot be
// reached yet is only logged, and requests are answered 503 until it can.
func checkStore(ctx context.Context, store idemstore.Store, logger *slog.Logger) error {
	ctx, cancel := context.WithTimeout(ctx, storeCheckTimeout)
	defer cancel()
	err := idempotency.CheckStore(ctx, store)
	switch {
	case err == nil:
		return nil
	case idemstore.IsPermanent(err):
		return fmt.Errorf("taskfn: the idempotency store refuses this function's calls: %w", err)
	}
	logger.Warn("the idempotency store cannot be checked yet; requests are answered 503 until it answers", "error", err)
	return nil
}
