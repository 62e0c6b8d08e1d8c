package redisstore_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

func envWith(url string) func(string) string {
	return func(name string) string {
		if name == redisstore.EnvURL {
			return url
		}
		return ""
	}
}

func TestClientFromEnv(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		url   string
		check func(t *testing.T, o *redis.Options)
	}{
		{"ElastiCache Serverless with RBAC user", "rediss://app:s3cret@ichido-abc123.serverless.euw1.cache.amazonaws.com:6379", func(t *testing.T, o *redis.Options) {
			require.Equal(t, "ichido-abc123.serverless.euw1.cache.amazonaws.com:6379", o.Addr)
			require.Equal(t, "app", o.Username)
			require.Equal(t, "s3cret", o.Password)
			require.NotNil(t, o.TLSConfig, "rediss:// uses TLS")
			require.False(t, o.TLSConfig.InsecureSkipVerify, "the certificate is verified")
			require.Nil(t, o.TLSConfig.RootCAs, "against the system roots")
			require.Equal(t, "ichido-abc123.serverless.euw1.cache.amazonaws.com", o.TLSConfig.ServerName)
			require.GreaterOrEqual(t, o.TLSConfig.MinVersion, uint16(tls.VersionTLS12))
			require.Equal(t, 0, o.DB)
		}},
		{"defaults for Lambda", "rediss://cache.example.com", func(t *testing.T, o *redis.Options) {
			require.Equal(t, "cache.example.com:6379", o.Addr)
			require.Equal(t, redisstore.DefaultDialTimeout, o.DialTimeout)
			require.Equal(t, redisstore.DefaultReadTimeout, o.ReadTimeout)
			require.Equal(t, redisstore.DefaultWriteTimeout, o.WriteTimeout)
			require.Equal(t, redisstore.DefaultPoolSize, o.PoolSize)
			require.Equal(t, redisstore.DefaultMaxRetries, o.MaxRetries)
			require.LessOrEqual(t, o.DialTimeout, 2*time.Second)
			require.True(t, o.ContextTimeoutEnabled, "the Lambda's deadline bounds every call")
			require.Equal(t, 2, o.Protocol)
			require.True(t, o.DisableIdentity)
		}},
		{"password only (default user)", "rediss://:pw@cache.example.com:6380/2", func(t *testing.T, o *redis.Options) {
			require.Equal(t, "", o.Username)
			require.Equal(t, "pw", o.Password)
			require.Equal(t, "cache.example.com:6380", o.Addr)
			require.Equal(t, 2, o.DB)
		}},
		{"URL options override the defaults", "rediss://cache.example.com?dial_timeout=5s&pool_size=4&protocol=3", func(t *testing.T, o *redis.Options) {
			require.Equal(t, 5*time.Second, o.DialTimeout)
			require.Equal(t, 4, o.PoolSize)
			require.Equal(t, 3, o.Protocol)
			require.Equal(t, redisstore.DefaultReadTimeout, o.ReadTimeout)
		}},
		{"plain text on localhost", "redis://localhost:6379", func(t *testing.T, o *redis.Options) {
			require.Nil(t, o.TLSConfig)
			require.Equal(t, "localhost:6379", o.Addr)
		}},
		{"plain text on 127.0.0.1", "redis://127.0.0.1:7000/1", func(t *testing.T, o *redis.Options) {
			require.Nil(t, o.TLSConfig)
			require.Equal(t, 1, o.DB)
		}},
		{"plain text on ::1", "redis://[::1]:7000", func(t *testing.T, o *redis.Options) {
			require.Equal(t, "[::1]:7000", o.Addr)
		}},
		{"white space around", "  rediss://cache.example.com \n", func(t *testing.T, o *redis.Options) {
			require.Equal(t, "cache.example.com:6379", o.Addr)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := redisstore.ClientFromEnv(envWith(tc.url))
			require.NoError(t, err)
			t.Cleanup(func() { _ = c.Close() })
			client, ok := c.(*redis.Client)
			require.True(t, ok, "a single-endpoint client, got %T", c)
			tc.check(t, client.Options())
		})
	}
}

func TestClientFromEnvErrors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		url  string
		want string // in the message, besides the variable's name
	}{
		{"missing", "", "not set"},
		{"blank", "   ", "not set"},
		{"plain text to a remote host", "redis://cache.example.com:6379", "rediss://"},
		{"plain text to a private address", "redis://10.0.0.5:6379", "plain text"},
		{"other scheme", "https://cache.example.com", "must start with rediss://"},
		{"unix socket", "unix:///tmp/redis.sock", "must start with rediss://"},
		{"no scheme", "cache.example.com:6379", "must start with rediss://"},
		{"skip_verify", "rediss://cache.example.com?skip_verify=true", "always verified"},
		{"unknown option", "rediss://cache.example.com?colour=blue", "unexpected option"},
		{"bad database", "rediss://cache.example.com/zero", "database"},
		{"unparsable", "rediss://user:pa%zzss@cache.example.com", "not a valid URL"},
		{"no host", "rediss://", "no host"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := redisstore.ClientFromEnv(envWith(tc.url))
			require.Error(t, err)
			require.Nil(t, c)
			require.ErrorIs(t, err, redisstore.ErrEnv)
			require.Contains(t, err.Error(), "REDIS_URL")
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), "pa%zzss", "the password never shows")
		})
	}
}

// TestClientFromEnvConnects checks that the client reaches a real server
// and authenticates with the URL's credentials.
func TestClientFromEnvConnects(t *testing.T) {
	t.Parallel()
	srv := redistest.StartT(t, "--requirepass", "hunter2")
	ctx := context.Background()

	c, err := redisstore.ClientFromEnv(envWith("redis://:hunter2@" + srv.Addr))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	require.NoError(t, c.Ping(ctx).Err())

	wrong, err := redisstore.ClientFromEnv(envWith("redis://:wrong@" + srv.Addr))
	require.NoError(t, err, "ClientFromEnv does not connect")
	t.Cleanup(func() { _ = wrong.Close() })
	require.Error(t, wrong.Ping(ctx).Err())
}

// TestClientFromEnvVerifiesCertificate checks that rediss:// verifies the
// server's certificate: a server whose certificate no system root signed is
// refused, never used.
func TestClientFromEnvVerifiesCertificate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	redistest.StartT(t, "--tls-port", strconv.Itoa(port), "--tls-cert-file", certFile, "--tls-key-file", keyFile, "--tls-auth-clients", "no")

	c, err := redisstore.ClientFromEnv(envWith(fmt.Sprintf("rediss://127.0.0.1:%d", port)))
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	err = c.Ping(context.Background()).Err()
	var unknown x509.UnknownAuthorityError
	require.ErrorAs(t, err, &unknown, "a self-signed certificate is refused, got %v", err)

	// The same server answers over TLS when its certificate is trusted: the
	// refusal above is the verification, not a broken server.
	opts := c.(*redis.Client).Options()
	pool := x509.NewCertPool()
	certPEM, err := os.ReadFile(certFile)
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(certPEM))
	opts.TLSConfig.RootCAs = pool
	trusted := redis.NewClient(opts)
	t.Cleanup(func() { _ = trusted.Close() })
	require.NoError(t, trusted.Ping(context.Background()).Err())
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its key
// into dir, readable by the server.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "server.crt"), filepath.Join(dir, "server.key")
	require.NoError(t, os.WriteFile(certFile, pemBlock("CERTIFICATE", der), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pemBlock("PRIVATE KEY", keyDER), 0o600))
	return certFile, keyFile
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
