package dbpool

import (
	"cmp"
	"context"
	"crypto/x509"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Auth says how a function authenticates to the database. There is no
// default: a deployment states which one it means.
type Auth string

const (
	// AuthIAM connects to an RDS Proxy endpoint, or straight to an Aurora
	// cluster's writer endpoint. The password is an IAM auth token. TLS has
	// full certificate verification, against the CAs that Config.CA names.
	// Deployed functions use it.
	AuthIAM Auth = "iam"
	// AuthURL connects with a PostgreSQL URL as it stands (password or trust
	// authentication, TLS as the URL says). Local runs and tests use it.
	AuthURL Auth = "url"
)

// Defaults applied by New to zero-valued Config fields.
const (
	// DefaultPort is the PostgreSQL (and RDS Proxy) port.
	DefaultPort = 5432
	// DefaultMaxConns is the pool size per execution environment. A Lambda
	// environment serves one request at a time. The idempotency layer needs at
	// most one connection for the store and one for the handler.
	DefaultMaxConns int32 = 2
	// DefaultMaxConnIdleTime closes connections idle for longer, well before
	// RDS Proxy's 1800 s client idle timeout closes them from the other side.
	DefaultMaxConnIdleTime = 5 * time.Minute
	// DefaultMaxConnLifetime bounds how long one connection (and so one
	// proxy client session and one IAM authentication) is kept.
	DefaultMaxConnLifetime = 30 * time.Minute
	// DefaultPingAfterIdle: a connection idle at least this long is pinged
	// before it is handed out. So one that died while the execution environment
	// was frozen is replaced instead of failing a request.
	DefaultPingAfterIdle = time.Second
	// DefaultPingTimeout bounds that ping, so a connection whose peer
	// vanished without a reset does not hang the request.
	DefaultPingTimeout = 2 * time.Second
	// DefaultConnectTimeout bounds one connection attempt (TCP, TLS and
	// authentication).
	DefaultConnectTimeout = 5 * time.Second
)

// Config describes how to reach the database. The zero value of every
// optional field means its default; Auth is required. ConfigFromEnv builds
// one from the environment.
type Config struct {
	// Auth selects IAM authentication to RDS Proxy or a plain URL
	// (DB_AUTH). Required.
	Auth Auth

	// URL is the connection URL in url mode (DATABASE_URL). Required in url
	// mode and must be empty in iam mode.
	URL string

	// Host is the writer endpoint in iam mode (DB_HOST): the RDS Proxy
	// default (read/write) endpoint, or the Aurora cluster endpoint when
	// there is no proxy. A bare host name, also used as the TLS server name
	// and signed into the auth token. Required in iam mode.
	Host string
	// Port is the endpoint's port in iam mode (DB_PORT). Defaults to 5432.
	Port int
	// Database is the database name in iam mode (DB_NAME). Required in iam
	// mode.
	Database string
	// User is the database user in iam mode (DB_USER), named in the execution
	// role's rds-db:connect resource. Through RDS Proxy, it is a user the proxy
	// can log in as (through its Secrets Manager secret). Straight to the
	// cluster, it is a user granted rds_iam. Required in iam mode.
	User string
	// Region is the AWS region the auth token is signed for (AWS_REGION).
	// Required in iam mode.
	Region string
	// Credentials signs the auth tokens in iam mode. Defaults to the AWS
	// default credential chain (the function's execution role), loaded once
	// by New.
	Credentials aws.CredentialsProvider
	// CA names the certificate authorities that verify the server in iam mode
	// (DB_TLS_CA). CASystem ("system") is the system roots. On
	// provided.al2023 they include the Amazon Trust Services roots that sign
	// RDS Proxy certificates. CARDS ("rds") is the Amazon RDS CAs built into
	// this package, which sign Aurora cluster certificates. Any other value
	// is the path of a PEM file of CA certificates. Defaults to CASystem.
	CA string
	// RootCAs, when set, verifies the server certificate in iam mode
	// instead of the CAs that CA names.
	RootCAs *x509.CertPool

	// MaxConns is the pool size (DB_MAX_CONNS). Defaults to 2, or in url
	// mode to the URL's pool_max_conns.
	MaxConns int32
	// QueryMode is how queries are sent (DB_QUERY_MODE). Defaults to
	// QueryModeExec, which works through a transaction-pooling proxy;
	// QueryModePrepared is for direct connections only. In url mode the
	// URL's default_query_exec_mode (exec or cache_statement) sets it.
	QueryMode QueryMode
	// MaxConnIdleTime closes a connection idle for longer. Defaults to 5
	// minutes, well under RDS Proxy's 30-minute client idle timeout.
	MaxConnIdleTime time.Duration
	// MaxConnLifetime closes a connection older than this (give or take a
	// tenth, so connections do not all close together). Defaults to 30
	// minutes.
	MaxConnLifetime time.Duration
	// PingAfterIdle: a connection idle at least this long is pinged before
	// use and replaced if the ping fails. Defaults to 1 second.
	PingAfterIdle time.Duration
	// PingTimeout bounds that ping. Defaults to 2 seconds.
	PingTimeout time.Duration
	// ConnectTimeout bounds one connection attempt: TCP, TLS and authentication
	// (DB_CONNECT_TIMEOUT, a Go duration such as 3s). Defaults to 5 seconds; in
	// url mode a connect_timeout in the URL wins. Keep it well inside the
	// function's timeout. A paused Aurora cluster holds connections while it
	// resumes. A request should be answered 503 before Lambda's timeout rather
	// than end in it.
	ConnectTimeout time.Duration

	// LookupFunc resolves the host name to addresses in iam mode, where the
	// token is signed for the name and the connection goes to an address.
	// Defaults to the system resolver.
	LookupFunc func(ctx context.Context, host string) ([]string, error)
}

// QueryMode says how the pool sends queries.
type QueryMode string

const (
	// QueryModeExec sends each query on the unnamed statement in one round
	// trip (pgx.QueryExecModeExec): nothing outlives the query, so it works
	// through any transaction-pooling proxy (RDS Proxy, PgBouncer). The
	// server parses and plans every call. The default.
	QueryModeExec QueryMode = "exec"
	// QueryModePrepared prepares each statement once per connection and
	// reuses it (pgx.QueryExecModeCacheStatement), so the server plans it
	// once: a replay through pgstore takes about half the time. Named
	// prepared statements are session state: use it only on a direct
	// connection to PostgreSQL (a local server, the cluster's writer
	// endpoint), never through RDS Proxy or PgBouncer. pgstore checks each
	// connection on its first use and refuses, with a permanent error,
	// one that goes through a pooler.
	QueryModePrepared QueryMode = "prepared"
)

// ConfigFromEnv reads the database settings from getenv (os.Getenv in a
// function's main). They are DB_AUTH (iam or url, required), DATABASE_URL (url
// mode), DB_HOST, DB_PORT, DB_NAME, DB_USER, AWS_REGION, DB_TLS_CA (iam mode),
// DB_MAX_CONNS, DB_CONNECT_TIMEOUT and DB_QUERY_MODE. In url mode the iam
// variables are ignored, so that a local run may override DB_AUTH and
// DATABASE_URL on top of a deployed function's environment.
//
// In iam mode it refuses settings that would send a password or weaken TLS.
// Those are DATABASE_URL, PGPASSWORD or PGPASSFILE set, and PGSSLMODE other
// than verify-full. The PostgreSQL driver would otherwise read them. Every
// error is a *ConfigError naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	env := func(name string) string { return strings.TrimSpace(getenv(name)) }
	var cfg Config
	switch a := env("DB_AUTH"); Auth(a) {
	case AuthIAM, AuthURL:
		cfg.Auth = Auth(a)
	case "":
		return Config{}, configErr("DB_AUTH", "is not set: set it to %q (RDS Proxy with IAM authentication) or %q (DATABASE_URL)", AuthIAM, AuthURL)
	default:
		return Config{}, configErr("DB_AUTH", "is %q: set it to %q or %q", a, AuthIAM, AuthURL)
	}

	if s := env("DB_MAX_CONNS"); s != "" {
		n, err := strconv.ParseInt(s, 10, 32)
		if err != nil || n < 1 {
			return Config{}, configErr("DB_MAX_CONNS", "is %q: set a whole number of at least 1, or leave it unset for %d", s, DefaultMaxConns)
		}
		cfg.MaxConns = int32(n)
	}
	if s := env("DB_CONNECT_TIMEOUT"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return Config{}, configErr("DB_CONNECT_TIMEOUT", "is %q: set a duration from 100ms to 1m such as 3s, or leave it unset for %v", s, DefaultConnectTimeout)
		}
		cfg.ConnectTimeout = d
	}

	switch m := QueryMode(env("DB_QUERY_MODE")); m {
	case "", QueryModeExec, QueryModePrepared:
		cfg.QueryMode = m
	default:
		return Config{}, configErr("DB_QUERY_MODE", "is %q: set %q (the default, safe through RDS Proxy and PgBouncer) or %q (a direct connection only)", m, QueryModeExec, QueryModePrepared)
	}

	if cfg.Auth == AuthURL {
		cfg.URL = env("DATABASE_URL")
		return cfg, cfg.validate()
	}

	if env("DATABASE_URL") != "" {
		return Config{}, configErr("DATABASE_URL", "is set but DB_AUTH is %q: iam mode connects with DB_HOST, DB_PORT, DB_NAME, DB_USER and AWS_REGION; unset DATABASE_URL or set DB_AUTH=url", AuthIAM)
	}
	for _, name := range []string{"PGPASSWORD", "PGPASSFILE"} {
		if getenv(name) != "" {
			return Config{}, configErr(name, "is set but DB_AUTH is %q: the password is an IAM auth token the pool signs; unset %s", AuthIAM, name)
		}
	}
	if m := env("PGSSLMODE"); m != "" && m != "verify-full" {
		return Config{}, configErr("PGSSLMODE", "is %q but DB_AUTH is %q, which always verifies the server certificate and host name (verify-full); unset PGSSLMODE", m, AuthIAM)
	}
	cfg.Host = env("DB_HOST")
	cfg.Database = env("DB_NAME")
	cfg.User = env("DB_USER")
	cfg.Region = env("AWS_REGION")
	cfg.CA = env("DB_TLS_CA")
	if s := env("DB_PORT"); s != "" {
		p, err := strconv.Atoi(s)
		if err != nil || p < 1 || p > 65535 {
			return Config{}, configErr("DB_PORT", "is %q: set a port number (1-65535), or leave it unset for %d", s, DefaultPort)
		}
		cfg.Port = p
	}
	return cfg, cfg.validate()
}

// validate checks a Config built by hand or by ConfigFromEnv.
func (c Config) validate() error {
	if c.MaxConns < 0 {
		return configErr("DB_MAX_CONNS", "is %d: set at least 1, or 0 for the default %d", c.MaxConns, DefaultMaxConns)
	}
	switch c.QueryMode {
	case "", QueryModeExec, QueryModePrepared:
	default:
		return configErr("QueryMode", "is %q: use %q (the default, safe through a pooling proxy) or %q (direct connections only)", c.QueryMode, QueryModeExec, QueryModePrepared)
	}
	switch c.Auth {
	case AuthURL:
		if c.URL == "" {
			return configErr("DATABASE_URL", "is not set but DB_AUTH is %q: set it to a PostgreSQL URL such as postgres://user@127.0.0.1:5432/db", AuthURL)
		}
		if _, err := pgxpool.ParseConfig(c.URL); err != nil {
			// pgx redacts the password in its parse errors.
			return configErr("DATABASE_URL", "is not a valid PostgreSQL URL: %v", err)
		}
		_, err := c.fromURL()
		return err
	case AuthIAM:
	case "":
		return configErr("DB_AUTH", "is not set: set it to %q or %q", AuthIAM, AuthURL)
	default:
		return configErr("DB_AUTH", "is %q: set it to %q or %q", c.Auth, AuthIAM, AuthURL)
	}
	if c.URL != "" {
		return configErr("DATABASE_URL", "is set but DB_AUTH is %q: unset it", AuthIAM)
	}
	required := []struct{ name, value string }{
		{"DB_HOST", c.Host}, {"DB_NAME", c.Database}, {"DB_USER", c.User}, {"AWS_REGION", c.Region},
	}
	for _, r := range required {
		if r.value == "" {
			return configErr(r.name, "is not set but DB_AUTH is %q: DB_HOST, DB_NAME, DB_USER and AWS_REGION are required", AuthIAM)
		}
	}
	if strings.ContainsAny(c.Host, "/:@?=&# \t") {
		return configErr("DB_HOST", "is %q: set the bare host name of the RDS Proxy or Aurora cluster endpoint (no scheme, port, user, password or options)", c.Host)
	}
	if _, err := rootsFor(c.CA); err != nil {
		return err
	}
	if c.ConnectTimeout < 0 {
		return configErr("DB_CONNECT_TIMEOUT", "is %v: set a positive duration, or 0 for the default %v", c.ConnectTimeout, DefaultConnectTimeout)
	}
	if c.Port < 0 || c.Port > 65535 {
		return configErr("DB_PORT", "is %d: set a port number (1-65535)", c.Port)
	}
	if strings.ContainsAny(c.Region, "/:@ \t") {
		return configErr("AWS_REGION", "is %q: set a region name such as eu-west-1", c.Region)
	}
	return nil
}

// withDefaults returns c with every zero optional field set to its default.
func (c Config) withDefaults() Config {
	c.Port = cmp.Or(c.Port, DefaultPort)
	c.MaxConns = cmp.Or(c.MaxConns, DefaultMaxConns)
	c.MaxConnIdleTime = cmp.Or(c.MaxConnIdleTime, DefaultMaxConnIdleTime)
	c.MaxConnLifetime = cmp.Or(c.MaxConnLifetime, DefaultMaxConnLifetime)
	c.PingAfterIdle = cmp.Or(c.PingAfterIdle, DefaultPingAfterIdle)
	c.PingTimeout = cmp.Or(c.PingTimeout, DefaultPingTimeout)
	c.ConnectTimeout = cmp.Or(c.ConnectTimeout, DefaultConnectTimeout)
	return c
}
