package taskfn

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/dbpool"
)

// TestWithSetup: the setup's users come together or not at all, and the
// setup connects as each user with the configured connection otherwise
// unchanged.
func TestWithSetup(t *testing.T) {
	t.Parallel()
	m, err := NewMigrator(envOf(map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://admin:pw@db.example:5432/ichido?sslmode=disable"}))
	require.NoError(t, err)
	same, err := m.WithSetup("", " ", "")
	require.NoError(t, err)
	require.Same(t, m, same, "no users: migrations only")
	_, err = m.WithSetup("ichido_migrate", "", "ichido_check")
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "DB_SETUP_APP_USER")
	_, err = m.WithSetup("ichido_migrate", "ichido_app", "")
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, "DB_SETUP_CHECK_USER")

	s, err := m.WithSetup("ichido_migrate", "ichido_app", "ichido_check")
	require.NoError(t, err)
	require.Equal(t, "admin", s.setup.MasterUser, "the configured user is the master user")
	require.Equal(t, "ichido", s.setup.Database)
	require.Equal(t, "ichido_check", s.setup.CheckUser)
	require.Equal(t, "postgres://ichido_migrate:pw@db.example:5432/ichido?sslmode=disable", s.as("ichido_migrate").URL)

	noUser, err := NewMigrator(envOf(map[string]string{"DB_AUTH": "url", "DATABASE_URL": "postgres://db.example/ichido"}))
	require.NoError(t, err)
	_, err = noUser.WithSetup("ichido_migrate", "ichido_app", "ichido_check")
	require.ErrorIs(t, err, ErrConfig, "the setup needs to know the master user")

	iam, err := NewMigrator(envOf(map[string]string{"DB_AUTH": "iam", "DB_HOST": "proxy.example", "DB_NAME": "ichido", "DB_USER": "ichido_admin", "AWS_REGION": "eu-west-1"}))
	require.NoError(t, err)
	s, err = iam.WithSetup("ichido_migrate", "ichido_app", "ichido_check")
	require.NoError(t, err)
	c := s.as("ichido_migrate")
	require.Equal(t, dbpool.AuthIAM, c.Auth)
	require.Equal(t, "ichido_migrate", c.User, "a token for the migrate user")
	require.Equal(t, "proxy.example", c.Host)
	require.Equal(t, "ichido_admin", s.db.User, "the master user's settings are unchanged")
}

func TestVersionOf(t *testing.T) {
	t.Parallel()
	require.Equal(t, int64(6), versionOf("00006_task_activity.sql"))
	require.Equal(t, int64(1), versionOf("pgstore/0001_idempotency_keys.sql"))
	require.Equal(t, int64(0), versionOf("README.md"))
}

// TestConnectPatiently: an unreachable database is tried again until the
// context ends, and the error says so.
func TestConnectPatiently(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close() // refused from now on
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	cfg := dbpool.Config{Auth: dbpool.AuthURL, URL: fmt.Sprintf("postgres://x@127.0.0.1:%d/db?sslmode=disable&connect_timeout=1", port),
		ConnectTimeout: time.Second}
	_, err = connectPatiently(ctx, cfg)
	require.ErrorIs(t, err, dbpool.ErrUnreachable)
	require.ErrorIs(t, err, context.DeadlineExceeded, "it kept trying until the context ended, not only once")
}
