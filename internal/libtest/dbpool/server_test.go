package dbpool_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

// TestTLSVerifyFull runs iam mode against a real PostgreSQL that requires
// TLS (hostssl only) with a certificate for "localhost" from a test CA.
// The server trusts the client, so the auth token is sent but not checked:
// what is tested here is the TLS verification.
func TestTLSVerifyFull(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "test server CA")
	certPEM, keyPEM := ca.issue(t, []string{"localhost"})
	c := startCluster(t, pgtest.Options{
		NoCron:   true,
		Settings: map[string]string{"ssl": "on", "ssl_cert_file": "'server.crt'", "ssl_key_file": "'server.key'"},
		// Plain text is refused, except for pgtest's own setup, which
		// creates the database from "postgres".
		HBA: []string{
			"hostssl all all 127.0.0.1/32 trust",
			"hostnossl postgres postgres 127.0.0.1/32 trust",
			"hostnossl all all 127.0.0.1/32 reject",
		},
		Files: map[string][]byte{"server.crt": certPEM, "server.key": keyPEM},
	})
	cfg := func(host string, roots *x509.CertPool) dbpool.Config {
		return dbpool.Config{
			Auth: dbpool.AuthIAM, Host: host, Port: c.Port, Database: c.Database, User: "postgres", Region: "eu-west-1",
			Credentials: credentials.NewStaticCredentialsProvider("AKIDTESTEXAMPLE", "test-secret-key", ""),
			RootCAs:     roots,
		}
	}

	t.Run("right CA and host name", func(t *testing.T) {
		t.Parallel()
		pool, err := dbpool.New(t.Context(), cfg("localhost", ca.Pool))
		require.NoError(t, err)
		defer pool.Close()
		var ssl bool
		require.NoError(t, pool.QueryRow(t.Context(), "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl))
		require.True(t, ssl)
	})
	t.Run("wrong host name", func(t *testing.T) {
		t.Parallel()
		// 127.0.0.1 reaches the same server, but the certificate names
		// only localhost.
		_, err := dbpool.New(t.Context(), cfg("127.0.0.1", ca.Pool))
		var hostErr x509.HostnameError
		require.ErrorAs(t, err, &hostErr, "got %v", err)
	})
	t.Run("untrusted CA", func(t *testing.T) {
		t.Parallel()
		_, err := dbpool.New(t.Context(), cfg("localhost", newCA(t, "another CA").Pool))
		var authErr x509.UnknownAuthorityError
		require.ErrorAs(t, err, &authErr, "got %v", err)
	})
	t.Run("system roots do not know the test CA", func(t *testing.T) {
		t.Parallel()
		_, err := dbpool.New(t.Context(), cfg("localhost", nil))
		var authErr x509.UnknownAuthorityError
		require.ErrorAs(t, err, &authErr, "got %v", err)
	})
}

// TestRefusesServerInRecovery makes a standby of a private primary with
// pg_basebackup -R and checks that a pool pointed at it is refused.
func TestRefusesServerInRecovery(t *testing.T) {
	t.Parallel()
	primary := startCluster(t, pgtest.Options{NoCron: true})

	standbyDir := filepath.Join(os.TempDir(), fmt.Sprintf("dbpool-standby-%d-%d", os.Getpid(), time.Now().UnixNano()))
	t.Cleanup(func() { _ = os.RemoveAll(standbyDir) })
	out, err := primary.Exec(t.Context(), primary.Bin("pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(primary.Port), "-U", "postgres",
		"-D", standbyDir, "-R", "-X", "stream", "-c", "fast", "--no-sync")
	require.NoError(t, err, "pg_basebackup: %s", out)
	standby := startCluster(t, pgtest.Options{Dir: standbyDir, SkipInit: true, NoCron: true, Database: primary.Database})

	_, err = dbpool.New(t.Context(), dbpool.Config{Auth: dbpool.AuthURL, URL: standby.URL("")})
	require.ErrorIs(t, err, dbpool.ErrNotWriter)
	require.ErrorContains(t, err, "UNLOGGED")
	require.ErrorContains(t, err, "DATABASE_URL")

	// The primary, same data, is accepted: the refusal is about recovery.
	pool, err := dbpool.New(t.Context(), dbpool.Config{Auth: dbpool.AuthURL, URL: primary.URL("")})
	require.NoError(t, err)
	pool.Close()
}

// TestReplacesTerminatedConnection: a connection that the server closed
// between two invocations (as when a frozen execution environment's
// connection is dropped) is replaced on the next one, without an error.
func TestReplacesTerminatedConnection(t *testing.T) {
	t.Parallel()
	url, err := pgtest.SharedURL(t.Context())
	require.NoError(t, err)
	pool, err := dbpool.New(t.Context(), dbpool.Config{Auth: dbpool.AuthURL, URL: url, MaxConns: 1})
	require.NoError(t, err)
	defer pool.Close()

	invoke := func(ctx context.Context) (pid int32, err error) {
		err = pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid)
		return pid, err
	}
	first, err := invoke(t.Context())
	require.NoError(t, err)

	admin, err := pgx.Connect(t.Context(), url)
	require.NoError(t, err)
	defer admin.Close(context.Background())
	var terminated bool
	require.NoError(t, admin.QueryRow(t.Context(), "SELECT pg_terminate_backend($1, 5000)", first).Scan(&terminated))
	require.True(t, terminated)

	// Between invocations the connection sits idle for longer than
	// PingAfterIdle, so the next acquisition pings it first.
	time.Sleep(dbpool.DefaultPingAfterIdle + 100*time.Millisecond)

	second, err := invoke(t.Context())
	require.NoError(t, err, "the dead connection is replaced, not reported")
	require.NotEqual(t, first, second)
}
