package dbpool_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

// front stands where RDS Proxy would: it accepts a client's TLS connection,
// asks for a cleartext password as RDS Proxy does for IAM authentication,
// records the password, then hands the session to a real PostgreSQL
// (trust authentication) and relays bytes both ways. A real server never
// reveals the password a client sent; this is how the test sees it.
type front struct {
	Port int
	tls  *tls.Config
	// upstream is the real server's address.
	upstream string
	// refuseTLS makes the front answer 'N' to SSLRequest, like a server
	// without TLS.
	refuseTLS bool

	mu        sync.Mutex
	passwords []string
	params    []map[string]string
	plaintext int // startup messages received without TLS
	sslAsked  int
}

func startFront(t *testing.T, cert tls.Certificate, upstream string, refuseTLS bool) *front {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &front{
		Port:      l.Addr().(*net.TCPAddr).Port,
		tls:       &tls.Config{Certificates: []tls.Certificate{cert}},
		upstream:  upstream,
		refuseTLS: refuseTLS,
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Go(func() { f.serve(c) })
		}
	})
	return f
}

func (f *front) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	msg, err := pgproto3.NewBackend(c, c).ReceiveStartupMessage()
	if err != nil {
		return
	}
	if _, ok := msg.(*pgproto3.SSLRequest); !ok {
		f.mu.Lock()
		f.plaintext++
		f.mu.Unlock()
		return
	}
	f.mu.Lock()
	f.sslAsked++
	f.mu.Unlock()
	if f.refuseTLS {
		_, _ = c.Write([]byte{'N'})
		// A client that falls back to plain text sends its startup now.
		if msg, err := pgproto3.NewBackend(c, c).ReceiveStartupMessage(); err == nil {
			if _, ok := msg.(*pgproto3.StartupMessage); ok {
				f.mu.Lock()
				f.plaintext++
				f.mu.Unlock()
			}
		}
		return
	}
	if _, err := c.Write([]byte{'S'}); err != nil {
		return
	}
	tc := tls.Server(c, f.tls)
	if err := tc.Handshake(); err != nil {
		return
	}
	be := pgproto3.NewBackend(tc, tc)
	msg, err = be.ReceiveStartupMessage()
	if err != nil {
		return
	}
	startup, ok := msg.(*pgproto3.StartupMessage)
	if !ok {
		return
	}
	be.Send(&pgproto3.AuthenticationCleartextPassword{})
	if be.Flush() != nil || be.SetAuthType(pgproto3.AuthTypeCleartextPassword) != nil {
		return
	}
	msg, err = be.Receive()
	if err != nil {
		return
	}
	pw, ok := msg.(*pgproto3.PasswordMessage)
	if !ok {
		return
	}
	f.mu.Lock()
	f.passwords = append(f.passwords, pw.Password)
	f.params = append(f.params, startup.Parameters)
	f.mu.Unlock()

	// The client now waits for AuthenticationOk: the real server, with
	// trust authentication, sends it first.
	up, err := net.Dial("tcp", f.upstream)
	if err != nil {
		return
	}
	defer up.Close()
	fe := pgproto3.NewFrontend(up, up)
	fe.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber, Parameters: startup.Parameters})
	if fe.Flush() != nil {
		return
	}
	_ = c.SetDeadline(time.Time{})
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, tc); done <- struct{}{} }()
	go func() { _, _ = io.Copy(tc, up); done <- struct{}{} }()
	<-done
}

func (f *front) seen() (passwords []string, params []map[string]string, plaintext, sslAsked int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.passwords...), append([]map[string]string(nil), f.params...), f.plaintext, f.sslAsked
}

// sharedServer returns the address and database of the shared test cluster.
func sharedServer(t *testing.T) (addr, database string) {
	t.Helper()
	raw, err := pgtest.SharedURL(t.Context())
	require.NoError(t, err, "a PostgreSQL for tests")
	u, err := url.Parse(raw)
	require.NoError(t, err)
	return u.Host, u.Path[1:]
}

// rotatingCredentials hands out static test credentials whose session token
// changes on every call, as an execution role's credentials change when
// they are renewed, and counts the calls.
func rotatingCredentials(calls *atomic.Int64) aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(ctx context.Context) (aws.Credentials, error) {
		n := calls.Add(1)
		return credentials.NewStaticCredentialsProvider("AKIDTESTEXAMPLE", "test-secret-key", fmt.Sprintf("session-%d", n)).Retrieve(ctx)
	})
}

// checkToken parses an RDS IAM auth token as a presigned URL.
func checkToken(t *testing.T, token, endpoint, user, region, session string) {
	t.Helper()
	require.Regexp(t, `^`+regexp.QuoteMeta(endpoint)+`/?\?`, token, "the token starts with host:port?")
	u, err := url.Parse("https://" + token)
	require.NoError(t, err)
	require.Equal(t, endpoint, u.Host)
	q := u.Query()
	require.Equal(t, "connect", q.Get("Action"))
	require.Equal(t, user, q.Get("DBUser"))
	require.Equal(t, "900", q.Get("X-Amz-Expires"))
	require.Equal(t, "AWS4-HMAC-SHA256", q.Get("X-Amz-Algorithm"))
	require.Regexp(t, `^AKIDTESTEXAMPLE/\d{8}/`+region+`/rds-db/aws4_request$`, q.Get("X-Amz-Credential"))
	require.Regexp(t, `^[0-9a-f]{64}$`, q.Get("X-Amz-Signature"))
	require.Equal(t, session, q.Get("X-Amz-Security-Token"))
	date, err := time.Parse("20060102T150405Z", q.Get("X-Amz-Date"))
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), date, 5*time.Minute)
}

// TestIAMTokenReused: the pool signs one auth token and logs every new
// connection in with it while it is fresh, as AWS recommends, rather than
// one per connection.
func TestIAMTokenReused(t *testing.T) {
	t.Parallel()
	upstream, database := sharedServer(t)
	ca := newCA(t, "test proxy CA")
	f := startFront(t, ca.tlsCert(t, "localhost"), upstream, false)

	var calls atomic.Int64
	pool, err := dbpool.New(t.Context(), dbpool.Config{
		Auth:        dbpool.AuthIAM,
		Host:        "localhost",
		Port:        f.Port,
		Database:    database,
		User:        "postgres",
		Region:      "eu-west-1",
		Credentials: rotatingCredentials(&calls),
		RootCAs:     ca.Pool,
	})
	require.NoError(t, err)
	defer pool.Close()

	endpoint := "localhost:" + strconv.Itoa(f.Port)
	passwords, params, plaintext, _ := f.seen()
	require.Len(t, passwords, 1, "New connects once")
	checkToken(t, passwords[0], endpoint, "postgres", "eu-west-1", "session-1")
	require.Equal(t, map[string]string{"user": "postgres", "database": database}, params[0],
		"no startup parameter beyond user and database")
	require.Zero(t, plaintext, "the first connection sent its startup message over TLS")

	// Holding one connection while asking for another makes the pool open
	// a second one: it logs in with the same token.
	c1, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	c2, err := pool.Acquire(t.Context())
	require.NoError(t, err)
	var one, two int
	require.NoError(t, c1.QueryRow(t.Context(), "SELECT 1").Scan(&one))
	require.NoError(t, c2.QueryRow(t.Context(), "SELECT 2").Scan(&two))
	require.Equal(t, []int{1, 2}, []int{one, two})
	c1.Release()
	c2.Release()

	passwords, _, plaintext, _ = f.seen()
	require.Len(t, passwords, 2)
	require.Equal(t, passwords[0], passwords[1], "the second connection reuses the token")
	require.Equal(t, int64(1), calls.Load(), "credentials are asked once per token, not per connection")
	require.Zero(t, plaintext)
}

func TestIAMNeverFallsBackToPlainText(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "test proxy CA")
	f := startFront(t, ca.tlsCert(t, "localhost"), "", true)

	_, err := dbpool.New(t.Context(), dbpool.Config{
		Auth: dbpool.AuthIAM, Host: "localhost", Port: f.Port, Database: "ichido", User: "app", Region: "eu-west-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTESTEXAMPLE", "test-secret-key", ""),
		RootCAs:     ca.Pool,
	})
	require.Error(t, err)
	require.Contains(t, err.Error(), "TLS")
	require.NotContains(t, err.Error(), "X-Amz-Signature", "the token never appears in an error")
	_, _, plaintext, sslAsked := f.seen()
	require.Positive(t, sslAsked, "the client asked for TLS")
	require.Zero(t, plaintext, "no startup message was ever sent without TLS")
}

func TestIAMCredentialsFailure(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "test proxy CA")
	f := startFront(t, ca.tlsCert(t, "localhost"), "", false)
	failing := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{}, errors.New("no role")
	})
	_, err := dbpool.New(t.Context(), dbpool.Config{
		Auth: dbpool.AuthIAM, Host: "localhost", Port: f.Port, Database: "ichido", User: "app", Region: "eu-west-1",
		Credentials: failing, RootCAs: ca.Pool,
	})
	require.ErrorContains(t, err, "IAM auth token")
	require.ErrorContains(t, err, "no role")
	passwords, _, _, _ := f.seen()
	require.Empty(t, passwords, "no connection without a token")
}
