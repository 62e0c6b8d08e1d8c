package taskfn

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/storeenv"
)

// ErrConfig is matched (errors.Is) by every error that Build, NewMigrator
// and Migrate return for the environment: a setting is missing, malformed or
// contradicts another. Such an error wraps each *ConfigError, and each
// *dbpool.ConfigError of the database settings, so errors.As finds them.
// Nothing was connected.
var ErrConfig = errors.New("taskfn: invalid settings")

// ConfigError names the environment variable that is wrong and says what to
// do about it. It matches ErrConfig.
type ConfigError struct {
	// Variable is the environment variable at fault, e.g. "IDEMPOTENCY_STORE".
	Variable string
	// Problem says what is wrong with it.
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("taskfn: %s: %s", e.Variable, e.Problem)
}

// Is reports whether target is ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// The idempotency stores IDEMPOTENCY_STORE selects (package storeenv).
const (
	StorePostgres = storeenv.Postgres
	StoreRedis    = storeenv.Redis
	StoreDynamoDB = storeenv.DynamoDB
)

// config is everything the functions read from the environment, read in
// this one place.
type config struct {
	db       dbpool.Config
	store    string
	ttl      time.Duration
	logLevel slog.Level
}

// readConfig reads and checks the environment: the database settings
// (dbpool.ConfigFromEnv), IDEMPOTENCY_STORE (postgres, redis or dynamodb;
// defaults to postgres), REDIS_URL (required with redis, and must be empty
// otherwise so that a deployment never believes it uses Redis when it does
// not), IDEMPOTENCY_TABLE (likewise with dynamodb; package storeenv checks
// these), IDEMPOTENCY_TTL (a Go duration such as 24h; defaults to 24h) and
// LOG_LEVEL (debug, info, warn or error; defaults to info). Every problem is
// reported, not only the first.
func readConfig(getenv func(string) string) (config, error) {
	var errs []error
	db, err := dbpool.ConfigFromEnv(getenv)
	if err != nil {
		errs = append(errs, err)
	}
	c := config{db: db, ttl: idempotency.DefaultTTL, logLevel: slog.LevelInfo}

	if c.store, err = storeenv.Kind(getenv); err != nil {
		errs = append(errs, err)
	}

	if s := strings.TrimSpace(getenv("IDEMPOTENCY_TTL")); s != "" {
		ttl, err := time.ParseDuration(s)
		switch {
		case err != nil:
			errs = append(errs, &ConfigError{"IDEMPOTENCY_TTL", fmt.Sprintf("is %q, not a duration: write it like 24h or 90m", s)})
		case ttl < idempotency.DefaultMaxLease:
			errs = append(errs, &ConfigError{"IDEMPOTENCY_TTL", fmt.Sprintf("is %v: it must be at least %v, the longest a Lambda invocation (and so a claim) can last", ttl, idempotency.DefaultMaxLease)})
		default:
			c.ttl = ttl
		}
	}

	switch s := strings.ToLower(strings.TrimSpace(getenv("LOG_LEVEL"))); s {
	case "", "info":
	case "debug":
		c.logLevel = slog.LevelDebug
	case "warn", "warning":
		c.logLevel = slog.LevelWarn
	case "error":
		c.logLevel = slog.LevelError
	default:
		errs = append(errs, &ConfigError{"LOG_LEVEL", fmt.Sprintf("is %q: use debug, info, warn or error", s)})
	}
	if len(errs) > 0 {
		return config{}, fmt.Errorf("%w: %w", ErrConfig, errors.Join(errs...))
	}
	return c, nil
}
