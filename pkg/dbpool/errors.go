package dbpool

import (
	"errors"
	"fmt"
)

// ErrConfig is matched (errors.Is) by every *ConfigError: the settings are
// missing, malformed or contradict each other. Nothing was connected.
var ErrConfig = errors.New("dbpool: invalid database settings")

// ErrNotWriter is returned (wrapped) when a new connection lands on a server
// in recovery (a read replica or a standby). The idempotency table is
// UNLOGGED and UNLOGGED tables cannot be read or written on replicas, so
// such a connection is refused instead of failing later on a query.
var ErrNotWriter = errors.New("dbpool: the server is in recovery (a read replica), not the writer")

// ErrUnreachable is returned (wrapped) by Open when the server could not be
// reached for now. The first connection was refused or reset, got no answer
// within the connect timeout, or found the server still starting up. An
// Aurora cluster is starting up while it resumes from auto-pause. Open still
// returns the pool.
var ErrUnreachable = errors.New("dbpool: the database cannot be reached for now")

// ConfigError names the setting that is wrong and says what to do about it.
// It matches ErrConfig.
type ConfigError struct {
	// Variable is the environment variable (or Config field, for settings
	// that have no variable) at fault, e.g. "DB_AUTH".
	Variable string
	// Problem says what is wrong with it, in words a deployer can act on.
	Problem string
}

func (e *ConfigError) Error() string {
	return fmt.Sprintf("dbpool: %s: %s", e.Variable, e.Problem)
}

// Is reports whether target is ErrConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

func configErr(variable, format string, args ...any) error {
	return &ConfigError{Variable: variable, Problem: fmt.Sprintf(format, args...)}
}
