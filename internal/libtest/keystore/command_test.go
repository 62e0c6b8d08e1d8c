package keystore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ichido/ichido/internal/testkit/redistest"
)

// The operations command's tests run the command itself, built once from
// the workspace, as an operator runs it.
var keystoreBin string

func buildKeystore() (dir string, err error) {
	dir, err = os.MkdirTemp("", "keystore-test-")
	if err != nil {
		return "", err
	}
	keystoreBin = filepath.Join(dir, "keystore")
	out, err := exec.Command("go", "build", "-o", keystoreBin, "github.com/ichido/ichido/cmd/keystore").CombinedOutput()
	if err != nil {
		return dir, fmt.Errorf("building the keystore command: %v\n%s", err, out)
	}
	return dir, nil
}

// envPrefixes are the variables the command reads through its getenv
// (storeenv's settings). The command sees only what the test's getenv gives
// for them. The AWS SDK reads the process's environment directly, so the
// AWS_ variables a test sets with t.Setenv reach the command as they are.
var envPrefixes = []string{"DB_", "PG", "REDIS_", "IDEMPOTENCY_", "DATABASE_URL", "LOG_SECRET", "TEST_"}

// envNames are the variables the tests set.
var envNames = []string{
	"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL_DYNAMODB",
	"DATABASE_URL", "DB_AUTH", "DB_CONNECT_TIMEOUT", "DB_HOST", "DB_MAX_CONNS", "DB_NAME", "DB_PORT", "DB_QUERY_MODE", "DB_TLS_CA", "DB_USER",
	"IDEMPOTENCY_STORE", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_SCHEMA", "LOG_SECRET", "PGPASSWORD", "PGSSLMODE", "REDIS_URL",
}

// run runs the command with args and the environment getenv gives,
// writing its standard output to out. An exit status other than 0 is an
// error holding what it wrote to standard error.
func run(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	cmd := exec.CommandContext(ctx, keystoreBin, args...)
	for _, kv := range os.Environ() {
		ours := false
		for _, p := range envPrefixes {
			if strings.HasPrefix(kv, p) {
				ours = true
			}
		}
		if !ours {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	for _, name := range envNames {
		if v := getenv(name); v != "" {
			cmd.Env = append(cmd.Env, name+"="+v)
		}
	}
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return fmt.Errorf("keystore %s: %s", strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	}
	return err
}

func TestMain(m *testing.M) {
	dir, err := buildKeystore()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := runTests(m)
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// runTests runs the tests, then stops the Redis servers they shared.
func runTests(m *testing.M) int {
	code := m.Run()
	redistest.StopShared()
	return code
}
