package dbpool_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/dbpool"
)

// clusterEndpoint is an Aurora cluster (writer) endpoint name as the dev
// profile of template.yaml gives it in DB_HOST. The tests resolve it to the
// loopback address.
const clusterEndpoint = "ichido-cluster-1a2b3c.cluster-c9xyz1abcdef.eu-west-1.rds.amazonaws.com"

// toLoopback resolves every name to 127.0.0.1 and counts the lookups.
func toLoopback(n *atomic.Int64) func(context.Context, string) ([]string, error) {
	return func(_ context.Context, host string) ([]string, error) {
		n.Add(1)
		return []string{"127.0.0.1"}, nil
	}
}

// writeCA writes the CA's certificate as a PEM file, as a deployer would
// supply one with DB_TLS_CA.
func writeCA(t *testing.T, ca *testCA) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.cert.Raw}), 0o600))
	return path
}

// directEnv is the environment of the dev profile: IAM authentication
// straight to the cluster endpoint, the CA from DB_TLS_CA.
func directEnv(port int, ca string) map[string]string {
	return iamEnv(map[string]string{
		"DB_HOST":            clusterEndpoint,
		"DB_PORT":            strconv.Itoa(port),
		"DB_USER":            "ichido_app",
		"DB_TLS_CA":          ca,
		"DB_CONNECT_TIMEOUT": "2s",
	})
}

// The dev profile's settings, read from the environment, sign a token for
// the cluster endpoint and verify the cluster's certificate (verify-full)
// against the CA that DB_TLS_CA names.
func TestDirectClusterIAM(t *testing.T) {
	t.Parallel()
	upstream, database := sharedServer(t)
	ca := newCA(t, "test RDS CA")
	f := startFront(t, ca.tlsCert(t, clusterEndpoint), upstream, false)

	env := directEnv(f.Port, writeCA(t, ca))
	env["DB_NAME"] = database
	env["DB_USER"] = "postgres"
	cfg, err := dbpool.ConfigFromEnv(getenv(env))
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.ConnectTimeout)
	var calls, lookups atomic.Int64
	cfg.Credentials = rotatingCredentials(&calls)
	pool, err := dbpool.New(t.Context(), withLookup(cfg, toLoopback(&lookups)))
	require.NoError(t, err)
	defer pool.Close()

	var ssl bool
	require.NoError(t, pool.QueryRow(t.Context(), "SELECT true").Scan(&ssl))
	passwords, params, plaintext, _ := f.seen()
	require.Len(t, passwords, 1)
	checkToken(t, passwords[0], clusterEndpoint+":"+strconv.Itoa(f.Port), "postgres", "eu-west-1", "session-1")
	require.Equal(t, map[string]string{"user": "postgres", "database": database}, params[0])
	require.Zero(t, plaintext)
	require.Positive(t, lookups.Load(), "the endpoint name was resolved, not dialled as an address")
}

// verify-full: a certificate from another CA (the real RDS CAs do not sign
// the test's), or for another name, is refused before any password is sent.
func TestDirectClusterTLSVerifyFull(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "test RDS CA")
	other := newCA(t, "another CA")
	cases := []struct {
		name    string
		cert    []string // the names the server's certificate is for
		ca      string   // DB_TLS_CA
		wantErr string
	}{
		{"the built-in RDS CAs do not know the test CA", []string{clusterEndpoint}, dbpool.CARDS, "certificate signed by unknown authority"},
		{"the system roots do not either", []string{clusterEndpoint}, dbpool.CASystem, "certificate signed by unknown authority"},
		{"a CA file of another CA", []string{clusterEndpoint}, writeCA(t, other), "certificate signed by unknown authority"},
		{"a certificate for another name", []string{"ichido-cluster-1a2b3c.cluster-ro-c9xyz1abcdef.eu-west-1.rds.amazonaws.com"}, writeCA(t, ca), "certificate is valid for"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := startFront(t, ca.tlsCert(t, tc.cert...), "", false)
			cfg, err := dbpool.ConfigFromEnv(getenv(directEnv(f.Port, tc.ca)))
			require.NoError(t, err)
			cfg.Credentials = rotatingCredentials(new(atomic.Int64))
			var lookups atomic.Int64
			_, err = dbpool.Open(t.Context(), withLookup(cfg, toLoopback(&lookups)))
			require.ErrorContains(t, err, tc.wantErr)
			require.NotErrorIs(t, err, dbpool.ErrUnreachable, "a TLS failure is not a reason to wait")
			passwords, _, plaintext, sslAsked := f.seen()
			require.Empty(t, passwords, "no token is sent to an unverified server")
			require.Zero(t, plaintext)
			require.Positive(t, sslAsked)
		})
	}
}

// stall accepts connections and never answers: a host that takes the TCP
// connection but whose database does not speak, as a paused cluster holds
// a connection while it resumes.
func stall(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	var conns []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				close(done)
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().(*net.TCPAddr).Port
}

// closedPort returns a loopback port that nothing listens on.
func closedPort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	return port
}

// A server that refuses the connection, or never answers within the
// connect timeout, is unreachable for now: Open keeps the pool, whose
// every use then fails within the connect timeout; New gives no pool.
func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "test RDS CA")
	caFile := writeCA(t, ca)
	for name, port := range map[string]int{"refused": closedPort(t), "no answer": stall(t)} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := directEnv(port, caFile)
			env["DB_CONNECT_TIMEOUT"] = "300ms"
			cfg, err := dbpool.ConfigFromEnv(getenv(env))
			require.NoError(t, err)
			cfg.Credentials = rotatingCredentials(new(atomic.Int64))
			cfg = withLookup(cfg, toLoopback(new(atomic.Int64)))

			// The caller's own deadline (the function's timeout) is far
			// away: the connect timeout, not it, ends each attempt.
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			pool, err := dbpool.Open(ctx, cfg)
			require.ErrorIs(t, err, dbpool.ErrUnreachable)
			require.NotNil(t, pool)
			defer pool.Close()
			require.NotContains(t, err.Error(), "X-Amz-Signature")

			_, err = pool.Exec(ctx, "SELECT 1")
			require.Error(t, err)
			require.NoError(t, ctx.Err(), "the attempt ended before the caller's deadline")

			p, err := dbpool.New(ctx, cfg)
			require.ErrorIs(t, err, dbpool.ErrUnreachable)
			require.Nil(t, p)
		})
	}

	// A name that does not resolve is a wrong setting, not a pause.
	env := directEnv(5432, caFile)
	cfg, err := dbpool.ConfigFromEnv(getenv(env))
	require.NoError(t, err)
	cfg.Host = "no-such-cluster.invalid"
	cfg.Credentials = rotatingCredentials(new(atomic.Int64))
	pool, err := dbpool.Open(t.Context(), cfg)
	require.Error(t, err)
	require.NotErrorIs(t, err, dbpool.ErrUnreachable)
	require.Nil(t, pool)
}

// The built-in RDS CAs are root CAs of Amazon RDS, none expired, for the
// regions the stack may be deployed to, and RDSRootCAs holds all of them.
func TestRDSRootCAs(t *testing.T) {
	t.Parallel()
	text, err := os.ReadFile(filepath.Join("..", "..", "..", "pkg", "dbpool", "rds-ca-bundle.pem")) // the bundle dbpool embeds
	require.NoError(t, err)
	fromFile := x509.NewCertPool()
	names := map[string]bool{}
	for rest := text; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		require.True(t, cert.IsCA, cert.Subject)
		require.Equal(t, []string{"Amazon RDS"}, cert.Subject.OrganizationalUnit, cert.Subject)
		require.NoError(t, cert.CheckSignatureFrom(cert), "%s is a self-signed root", cert.Subject)
		require.True(t, time.Now().Before(cert.NotAfter), "%s has expired", cert.Subject)
		names[cert.Subject.CommonName] = true
		fromFile.AddCert(cert)
	}
	require.Greater(t, len(names), 80)
	for _, region := range []string{"us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-northeast-1", "ap-southeast-2", "sa-east-1"} {
		for _, kind := range []string{"RSA2048 G1", "RSA4096 G1", "ECC384 G1"} {
			require.True(t, names["Amazon RDS "+region+" Root CA "+kind], "no %s %s", region, kind)
		}
	}
	require.True(t, dbpool.RDSRootCAs().Equal(fromFile))
	require.False(t, strings.Contains(string(text), "PRIVATE KEY"))
}

func TestDirectConfigFromEnv(t *testing.T) {
	t.Parallel()
	cfg, err := dbpool.ConfigFromEnv(getenv(iamEnv(map[string]string{"DB_TLS_CA": "rds", "DB_CONNECT_TIMEOUT": "1500ms", "DB_QUERY_MODE": "prepared"})))
	require.NoError(t, err)
	require.Equal(t, dbpool.CARDS, cfg.CA)
	require.Equal(t, 1500*time.Millisecond, cfg.ConnectTimeout)
	require.Equal(t, dbpool.QueryModePrepared, cfg.QueryMode)

	bad := map[string]map[string]string{
		"DB_TLS_CA":          {"DB_TLS_CA": filepath.Join(t.TempDir(), "missing.pem")},
		"DB_CONNECT_TIMEOUT": {"DB_CONNECT_TIMEOUT": "3"},
		"DB_QUERY_MODE":      {"DB_QUERY_MODE": "cache_statement"},
	}
	empty := filepath.Join(t.TempDir(), "empty.pem")
	require.NoError(t, os.WriteFile(empty, []byte("not a certificate\n"), 0o600))
	for name, changes := range bad {
		_, err := dbpool.ConfigFromEnv(getenv(iamEnv(changes)))
		var ce *dbpool.ConfigError
		require.True(t, errors.As(err, &ce), "%s: %v", name, err)
		require.Equal(t, name, ce.Variable)
	}
	_, err = dbpool.ConfigFromEnv(getenv(iamEnv(map[string]string{"DB_TLS_CA": empty})))
	require.ErrorContains(t, err, "holds no PEM certificate")
	_, err = dbpool.ConfigFromEnv(getenv(iamEnv(map[string]string{"DB_CONNECT_TIMEOUT": "2m"})))
	require.ErrorIs(t, err, dbpool.ErrConfig)
}

// withLookup returns cfg resolving host names with lookup, so that a test
// can connect to an endpoint name that only it knows.
func withLookup(cfg dbpool.Config, lookup func(context.Context, string) ([]string, error)) dbpool.Config {
	cfg.LookupFunc = lookup
	return cfg
}
