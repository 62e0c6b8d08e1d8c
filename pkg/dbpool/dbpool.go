// Package dbpool opens the small PostgreSQL connection pool that a Lambda
// function needs. It connects to the Aurora writer with IAM authentication: a
// fresh auth token for each new connection, and TLS with full certificate
// verification. It goes through the RDS Proxy default endpoint or straight to
// the cluster's writer endpoint. For local runs and tests, it connects to a
// database given by URL.
//
// Through RDS Proxy the server's certificate is checked against the system
// roots (Amazon Trust Services); straight to the cluster, against the
// Amazon RDS CAs built into this package (Config.CA, DB_TLS_CA=rds).
//
// The pool is shaped for Lambda and for a transaction-pooling proxy:
//   - A few connections per execution environment, and none kept open on
//     purpose.
//   - Idle connections closed long before RDS Proxy would close them.
//   - A ping before reusing a connection that sat idle, since an environment
//     may have been frozen for minutes.
//   - Queries sent with the extended protocol's unnamed statement only
//     (pgx.QueryExecModeExec), so no prepared statement outlives a
//     transaction.
//
// Every new connection checks that it reached the writer: the idempotency
// table is UNLOGGED, and UNLOGGED tables cannot be used on replicas.
//
// Code using the pool must not pin a proxy session either. It sends no SET: use
// SET LOCAL or set_config(..., true) inside a transaction if ever needed. It
// takes no session advisory locks (pg_advisory_xact_lock is fine). It uses no
// SQL-level PREPARE, no LISTEN and no temporary tables.
package dbpool

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"

	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// New opens a pool as cfg describes and connects once before returning. So a
// wrong endpoint, a TLS or IAM failure, or a server in recovery (ErrNotWriter)
// is reported at cold start, not on the first request. The connection made
// stays in the pool for that first request.
//
// In iam mode the AWS credentials are resolved once here (the default chain
// unless cfg.Credentials is set). New connections share one auth token
// signed with them, renewed after 10 of its 15 minutes (sooner when the
// credentials expire sooner).
func New(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	pool, err := Open(ctx, cfg)
	if err != nil && pool != nil {
		pool.Close()
	}
	if err != nil {
		return nil, err
	}
	return pool, nil
}

// Open is New for a caller that would rather answer requests than fail at
// cold start while the database cannot be reached. The first connection may
// fail because the server refused it, reset it, did not answer within
// ConnectTimeout, or said it is starting up. An Aurora cluster resuming from
// auto-pause does all of these. Then Open returns the pool together with an
// error matching ErrUnreachable. The pool then connects on first use, and
// each use fails after at most ConnectTimeout until the server answers. Any
// other error (settings, TLS, authentication, ErrNotWriter) comes with a nil
// pool, as from New.
func Open(ctx context.Context, cfg Config) (*pgxpool.Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg, err := cfg.fromURL()
	if err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()

	var (
		pc     *pgxpool.Config
		target string // where we connect, for messages; never a password
	)
	switch cfg.Auth {
	case AuthIAM:
		pc, err = iamPoolConfig(ctx, cfg)
		target = fmt.Sprintf("%s@%s/%s (DB_HOST, DB_PORT, DB_USER, DB_NAME)", cfg.User, net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port)), cfg.Database)
	case AuthURL:
		pc, err = pgxpool.ParseConfig(cfg.URL)
		if err != nil {
			return nil, configErr("DATABASE_URL", "is not a valid PostgreSQL URL: %v", err)
		}
		if pc.ConnConfig.ConnectTimeout == 0 {
			pc.ConnConfig.ConnectTimeout = cfg.ConnectTimeout
		}
		cc := pc.ConnConfig
		target = fmt.Sprintf("%s@%s/%s (DATABASE_URL)", cc.User, net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), cc.Database)
	}
	if err != nil {
		return nil, err
	}
	shape(pc, cfg)

	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("dbpool: opening a pool for %s: %w", target, err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		if ctx.Err() == nil && unreachable(err) {
			return pool, fmt.Errorf("%w: %s: %w", ErrUnreachable, target, err)
		}
		pool.Close()
		return nil, fmt.Errorf("dbpool: connecting to %s: %w", target, err)
	}
	conn.Release()
	return pool, nil
}

// iamPoolConfig builds the connection settings for RDS Proxy: verify-full
// TLS, no fallback to another host or to plain text, no startup parameters
// beyond user and database, and a BeforeConnect hook that logs in with the
// pool's current auth token.
func iamPoolConfig(ctx context.Context, cfg Config) (*pgxpool.Config, error) {
	creds := cfg.Credentials
	if creds == nil {
		awsCfg, err := awsconfig.LoadDefaultConfig(ctx, awsconfig.WithRegion(cfg.Region))
		if err != nil {
			return nil, fmt.Errorf("dbpool: loading AWS credentials for IAM database authentication: %w", err)
		}
		if awsCfg.Credentials == nil {
			return nil, fmt.Errorf("dbpool: no AWS credentials found for IAM database authentication (the function's execution role provides them on Lambda)")
		}
		creds = awsCfg.Credentials
	}

	// Only the keywords given here are read from the string; whatever the
	// PG* environment variables add is overwritten below.
	pc, err := pgxpool.ParseConfig(fmt.Sprintf("host=%s port=%d dbname=%s user=%s sslmode=verify-full",
		quoteValue(cfg.Host), cfg.Port, quoteValue(cfg.Database), quoteValue(cfg.User)))
	if err != nil {
		return nil, configErr("DB_HOST", "cannot form a connection from DB_HOST, DB_PORT, DB_NAME and DB_USER: %v", err)
	}
	cc := pc.ConnConfig
	cc.Host, cc.Port, cc.Database, cc.User = cfg.Host, uint16(cfg.Port), cfg.Database, cfg.User
	cc.Password = "" // set per connection by BeforeConnect
	roots := cfg.RootCAs
	if roots == nil {
		if roots, err = rootsFor(cfg.CA); err != nil {
			return nil, err
		}
	}
	// A nil roots means the system roots. ServerName makes crypto/tls check
	// the certificate's names against the endpoint: verify-full.
	cc.TLSConfig = &tls.Config{ServerName: cfg.Host, RootCAs: roots, MinVersion: tls.VersionTLS12}
	// No fallbacks: pgconn never retries without TLS or on another host.
	cc.Fallbacks = nil
	cc.ValidateConnect = nil
	// Startup parameters other than user and database (PGAPPNAME,
	// PGOPTIONS...) could pin proxy sessions; send none.
	cc.RuntimeParams = map[string]string{}
	cc.ConnectTimeout = cfg.ConnectTimeout
	if cfg.LookupFunc != nil {
		cc.LookupFunc = cfg.LookupFunc
	}

	endpoint := net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.Port))
	tokens := &authTokens{endpoint: endpoint, region: cfg.Region, user: cfg.User, creds: creds}
	pc.BeforeConnect = func(ctx context.Context, cc *pgx.ConnConfig) error {
		token, err := tokens.get(ctx)
		if err != nil {
			return fmt.Errorf("dbpool: building the IAM auth token for %s@%s: %w", cfg.User, endpoint, err)
		}
		cc.Password = token
		return nil
	}
	return pc, nil
}

// shape sets what both modes share: the pool's size and timings for Lambda,
// the query mode for a transaction-pooling proxy, and the writer check.
func shape(pc *pgxpool.Config, cfg Config) {
	pc.MaxConns = cfg.MaxConns
	pc.MinConns = 0
	pc.MinIdleConns = 0
	pc.MaxConnIdleTime = cfg.MaxConnIdleTime
	pc.MaxConnLifetime = cfg.MaxConnLifetime
	pc.MaxConnLifetimeJitter = cfg.MaxConnLifetime / 10
	pc.PingTimeout = cfg.PingTimeout
	pingAfter := cfg.PingAfterIdle
	pc.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool {
		return p.IdleDuration >= pingAfter
	}

	// QueryExecModeExec sends each query as Parse/Bind/Execute on the
	// unnamed statement in one round trip: no named prepared statement that
	// a transaction-pooling proxy could route to another server connection,
	// and no Describe round trip that could land elsewhere (DescribeExec).
	// Parameter types come from the Go types of the arguments.
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pc.ConnConfig.StatementCacheCapacity = 0
	pc.ConnConfig.DescriptionCacheCapacity = 0
	if cfg.QueryMode == QueryModePrepared {
		// Direct connections only: see QueryModePrepared.
		pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeCacheStatement
		pc.ConnConfig.StatementCacheCapacity = 64
	}

	hint := "DATABASE_URL must point at the primary"
	if cfg.Auth == AuthIAM {
		hint = fmt.Sprintf("DB_HOST %q must be the RDS Proxy default (read/write) endpoint or the cluster (writer) endpoint, not a read-only endpoint or a reader instance", cfg.Host)
	}
	pc.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		var inRecovery bool
		if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&inRecovery); err != nil {
			return fmt.Errorf("dbpool: checking that the server is the writer: %w", err)
		}
		if inRecovery {
			return fmt.Errorf("%w: the idempotency table is UNLOGGED and UNLOGGED tables cannot be used on replicas; %s", ErrNotWriter, hint)
		}
		return nil
	}
}

// quoteValue quotes a keyword/value connection string value.
func quoteValue(s string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(s) + "'"
}

// unreachable reports whether a failed connection attempt means the server
// could not be reached for now, rather than a wrong setting: refused,
// reset, unroutable, timed out, or "the database system is starting up".
// A host name that does not resolve is a wrong setting.
func unreachable(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.IsTimeout || dnsErr.IsTemporary
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code == pgerrcode.CannotConnectNow
	}
	if pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH, syscall.ENETUNREACH, syscall.ETIMEDOUT} {
		if errors.Is(err, errno) {
			return true
		}
	}
	var netErr net.Error
	return errors.As(err, &netErr) && netErr.Timeout()
}
