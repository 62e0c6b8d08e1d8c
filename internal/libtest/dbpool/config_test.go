package dbpool_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/dbpool"
)

func getenv(env map[string]string) func(string) string {
	return func(name string) string { return env[name] }
}

// iamEnv is a complete iam-mode environment plus the given changes ("" to
// remove a variable).
func iamEnv(changes map[string]string) map[string]string {
	env := map[string]string{
		"DB_AUTH":    "iam",
		"DB_HOST":    "tasks.proxy-abc123.eu-west-1.rds.amazonaws.com",
		"DB_PORT":    "5432",
		"DB_NAME":    "ichido",
		"DB_USER":    "app",
		"AWS_REGION": "eu-west-1",
	}
	for k, v := range changes {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return env
}

func TestConfigFromEnv(t *testing.T) {
	t.Parallel()
	ok := []struct {
		name string
		env  map[string]string
		want dbpool.Config
	}{
		{"iam", iamEnv(nil), dbpool.Config{Auth: dbpool.AuthIAM, Host: "tasks.proxy-abc123.eu-west-1.rds.amazonaws.com", Port: 5432, Database: "ichido", User: "app", Region: "eu-west-1"}},
		{"iam without DB_PORT uses the default", iamEnv(map[string]string{"DB_PORT": ""}), dbpool.Config{Auth: dbpool.AuthIAM, Host: "tasks.proxy-abc123.eu-west-1.rds.amazonaws.com", Database: "ichido", User: "app", Region: "eu-west-1"}},
		{"iam with DB_MAX_CONNS and PGSSLMODE=verify-full", iamEnv(map[string]string{"DB_MAX_CONNS": "3", "PGSSLMODE": "verify-full"}), dbpool.Config{Auth: dbpool.AuthIAM, Host: "tasks.proxy-abc123.eu-west-1.rds.amazonaws.com", Port: 5432, Database: "ichido", User: "app", Region: "eu-west-1", MaxConns: 3}},
		{"url", map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://me:secret@127.0.0.1:5433/ichido?sslmode=disable"}, dbpool.Config{Auth: dbpool.AuthURL, URL: "postgres://me:secret@127.0.0.1:5433/ichido?sslmode=disable"}},
		{"url ignores the iam variables", iamEnv(map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://127.0.0.1/ichido"}), dbpool.Config{Auth: dbpool.AuthURL, URL: "postgres://127.0.0.1/ichido"}},
	}
	for _, tc := range ok {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := dbpool.ConfigFromEnv(getenv(tc.env))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}

	bad := []struct {
		name     string
		env      map[string]string
		variable string
		contains string
	}{
		{"nothing set", map[string]string{}, "DB_AUTH", "is not set"},
		{"unknown mode", map[string]string{"DB_AUTH": "password", "DATABASE_URL": "postgres://x/y"}, "DB_AUTH", `is "password"`},
		{"mode in capitals is not guessed", iamEnv(map[string]string{"DB_AUTH": "IAM"}), "DB_AUTH", `is "IAM"`},
		{"url without DATABASE_URL", map[string]string{"DB_AUTH": "url"}, "DATABASE_URL", "is not set"},
		{"url with a broken DATABASE_URL", map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://me:secret@host:notaport/db"}, "DATABASE_URL", "not a valid PostgreSQL URL"},
		{"iam without DB_HOST", iamEnv(map[string]string{"DB_HOST": ""}), "DB_HOST", "is not set"},
		{"iam without DB_NAME", iamEnv(map[string]string{"DB_NAME": ""}), "DB_NAME", "is not set"},
		{"iam without DB_USER", iamEnv(map[string]string{"DB_USER": ""}), "DB_USER", "is not set"},
		{"iam without AWS_REGION", iamEnv(map[string]string{"AWS_REGION": ""}), "AWS_REGION", "is not set"},
		{"iam with DATABASE_URL", iamEnv(map[string]string{"DATABASE_URL": "postgres://app@db/ichido"}), "DATABASE_URL", "is set but DB_AUTH is \"iam\""},
		{"iam with PGPASSWORD", iamEnv(map[string]string{"PGPASSWORD": "hunter2"}), "PGPASSWORD", "IAM auth token"},
		{"iam with PGPASSFILE", iamEnv(map[string]string{"PGPASSFILE": "/root/.pgpass"}), "PGPASSFILE", "IAM auth token"},
		{"iam with PGSSLMODE=require", iamEnv(map[string]string{"PGSSLMODE": "require"}), "PGSSLMODE", "verify-full"},
		{"iam with PGSSLMODE=prefer", iamEnv(map[string]string{"PGSSLMODE": "prefer"}), "PGSSLMODE", "verify-full"},
		{"iam with PGSSLMODE=disable", iamEnv(map[string]string{"PGSSLMODE": "disable"}), "PGSSLMODE", "verify-full"},
		{"iam with a URL in DB_HOST", iamEnv(map[string]string{"DB_HOST": "postgres://app:pw@db/ichido"}), "DB_HOST", "bare host name"},
		{"iam with a port in DB_HOST", iamEnv(map[string]string{"DB_HOST": "db.example.com:5432"}), "DB_HOST", "bare host name"},
		{"iam with options in DB_HOST", iamEnv(map[string]string{"DB_HOST": "db.example.com?sslmode=disable"}), "DB_HOST", "bare host name"},
		{"iam with a bad DB_PORT", iamEnv(map[string]string{"DB_PORT": "fivefourthreetwo"}), "DB_PORT", "port number"},
		{"iam with DB_PORT out of range", iamEnv(map[string]string{"DB_PORT": "70000"}), "DB_PORT", "port number"},
		{"DB_MAX_CONNS zero", iamEnv(map[string]string{"DB_MAX_CONNS": "0"}), "DB_MAX_CONNS", "at least 1"},
		{"DB_MAX_CONNS not a number", map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://x/y", "DB_MAX_CONNS": "two"}, "DB_MAX_CONNS", "at least 1"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := dbpool.ConfigFromEnv(getenv(tc.env))
			require.ErrorIs(t, err, dbpool.ErrConfig)
			var ce *dbpool.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.variable, ce.Variable)
			require.Contains(t, err.Error(), tc.variable)
			require.Contains(t, err.Error(), tc.contains)
			require.NotContains(t, err.Error(), "secret", "a password must never appear in an error")
			require.NotContains(t, err.Error(), "hunter2", "a password must never appear in an error")
		})
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	_, err := dbpool.New(t.Context(), dbpool.Config{})
	require.ErrorIs(t, err, dbpool.ErrConfig)
	require.Contains(t, err.Error(), "DB_AUTH")

	_, err = dbpool.New(t.Context(), dbpool.Config{Auth: dbpool.AuthIAM, URL: "postgres://x/y", Host: "h", Database: "d", User: "u", Region: "r"})
	require.ErrorIs(t, err, dbpool.ErrConfig)
	require.Contains(t, err.Error(), "DATABASE_URL")
}
