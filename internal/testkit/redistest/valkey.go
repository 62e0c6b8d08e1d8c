package redistest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// Valkey is the second server the Redis store is tested on: Valkey 8.1,
// whose SET … IFEQ lets the store complete a record with one native
// command instead of a script. Debian 12 has no such server (its Redis is
// 7.0), so scripts/install-valkey.sh (run by make deps) builds one from
// Debian's source tarball into .local/valkey/<version>.

// ValkeyVersion is the version scripts/install-valkey.sh builds.
const ValkeyVersion = "8.1.1"

// EnvValkeyURL names the variable that points the tests at an existing
// Valkey 8.1 (or Redis 8.4) server instead of a private one.
const EnvValkeyURL = "TEST_VALKEY_URL"

// EnvValkeyBin names the variable that gives the path of valkey-server.
const EnvValkeyBin = "VALKEY_SERVER_BIN"

// ValkeyBin returns the path of the valkey-server that make deps built, or
// VALKEY_SERVER_BIN when set.
func ValkeyBin() (string, error) {
	if bin := os.Getenv(EnvValkeyBin); bin != "" {
		if _, err := os.Stat(bin); err != nil {
			return "", fmt.Errorf("redistest: %s: %w", EnvValkeyBin, err)
		}
		return bin, nil
	}
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(root, ".local", "valkey", ValkeyVersion, "bin", "valkey-server")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("redistest: valkey-server %s is needed and is not built: run 'make deps' (or scripts/install-valkey.sh), or set %s", ValkeyVersion, EnvValkeyURL)
	}
	return bin, nil
}

// StartValkey starts a private valkey-server as Start starts redis-server.
func StartValkey(ctx context.Context, extraArgs ...string) (*Server, error) {
	bin, err := ValkeyBin()
	if err != nil {
		return nil, err
	}
	return startBin(ctx, bin, extraArgs)
}

var sharedValkey sharedServer

// ValkeyURL returns the URL of the Valkey server the tests of this binary
// share: TEST_VALKEY_URL when set, else a private server started on first
// use and stopped by Main. It fails t when no server can be had.
func ValkeyURL(t testing.TB) string {
	t.Helper()
	if u := os.Getenv(EnvValkeyURL); u != "" {
		return u
	}
	u, err := sharedValkey.url(StartValkey)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// NewValkeyClient returns a client on the shared Valkey server (see
// ValkeyURL), closed when t ends.
func NewValkeyClient(t testing.TB) *redis.Client {
	t.Helper()
	return clientAt(t, ValkeyURL(t), EnvValkeyURL)
}
