package redisstore

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// EnvURL is the environment variable ClientFromEnv reads.
const EnvURL = "REDIS_URL"

// Client defaults suited to a Lambda execution environment: one request at a
// time, a few seconds of budget, and a cache in the same VPC.
const (
	// DefaultDialTimeout bounds a new connection, TLS handshake included.
	DefaultDialTimeout = 2 * time.Second
	// DefaultReadTimeout bounds the wait for one reply.
	DefaultReadTimeout = 2 * time.Second
	// DefaultWriteTimeout bounds the sending of one command.
	DefaultWriteTimeout = 2 * time.Second
	// DefaultPoolSize is the number of connections per execution
	// environment; it handles one request at a time.
	DefaultPoolSize = 2
	// DefaultMaxRetries is how many times a command is retried after a network
	// error. Running a script again is safe. A repeated claim by the same owner
	// succeeds. A Complete or Release whose first run was applied but whose
	// reply was lost reports ErrLeaseLost. The decorator logs it and otherwise
	// ignores it.
	DefaultMaxRetries = 1
)

// ErrEnv is wrapped by every error of ClientFromEnv: the environment does
// not describe a usable Redis server.
var ErrEnv = errors.New("redisstore: bad Redis configuration")

// ClientFromEnv returns a client on the server named by REDIS_URL, read
// through getenv (os.Getenv in a Lambda main):
//
//   - rediss://[user:password@]host[:port][/db] connects with TLS and full
//     certificate verification against the system roots (ElastiCache
//     Serverless requires TLS); user and password authenticate with AUTH,
//     as an ElastiCache RBAC user or with the default user's password.
//   - redis://… (plain text) is accepted only for a loopback host
//     (localhost, 127.0.0.0/8, ::1): a local server for development.
//
// The client gets small timeouts and pool (DefaultDialTimeout and the
// others); go-redis's query options in the URL (dial_timeout, read_timeout,
// pool_size, max_retries, …) override them, except skip_verify, which is
// refused. The client respects the deadline of each call's context, speaks
// RESP2 unless the URL asks for protocol=3, and sends nothing on connect
// beyond authentication and SELECT. ClientFromEnv does not connect: the first
// command does.
//
// Errors wrap ErrEnv and name the variable; they never repeat its password.
func ClientFromEnv(getenv func(string) string) (redis.UniversalClient, error) {
	raw := strings.TrimSpace(getenv(EnvURL))
	if raw == "" {
		return nil, fmt.Errorf("%w: %s is not set; IDEMPOTENCY_STORE=redis needs it (rediss://[user:password@]host:port)", ErrEnv, EnvURL)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the whole URL, password included: keep only
		// its cause.
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err
		}
		return nil, fmt.Errorf("%w: %s is not a valid URL: %v", ErrEnv, EnvURL, err)
	}
	switch u.Scheme {
	case "rediss":
	case "redis":
		if !isLoopback(u.Hostname()) {
			return nil, fmt.Errorf("%w: %s uses redis:// (plain text) for the non-loopback host %q; use rediss:// (TLS), which ElastiCache Serverless requires", ErrEnv, EnvURL, u.Hostname())
		}
	default:
		return nil, fmt.Errorf("%w: %s must start with rediss:// (or redis:// for a loopback host), not %q", ErrEnv, EnvURL, u.Scheme+"://")
	}
	if u.Hostname() == "" {
		return nil, fmt.Errorf("%w: %s has no host", ErrEnv, EnvURL)
	}
	if u.Query().Has("skip_verify") {
		return nil, fmt.Errorf("%w: %s sets skip_verify: the server's certificate is always verified", ErrEnv, EnvURL)
	}
	opts, err := redis.ParseURL(u.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrEnv, EnvURL, err)
	}
	applyDefaults(opts)
	return redis.NewClient(opts), nil
}

// applyDefaults fills the options the URL left unset.
func applyDefaults(o *redis.Options) {
	o.DialTimeout = cmp.Or(o.DialTimeout, DefaultDialTimeout)
	o.ReadTimeout = cmp.Or(o.ReadTimeout, DefaultReadTimeout)
	o.WriteTimeout = cmp.Or(o.WriteTimeout, DefaultWriteTimeout)
	o.PoolSize = cmp.Or(o.PoolSize, DefaultPoolSize)
	o.MaxRetries = cmp.Or(o.MaxRetries, DefaultMaxRetries)
	// RESP2 works on every Redis and Valkey version without a HELLO round
	// trip; the scripts need nothing of RESP3.
	o.Protocol = cmp.Or(o.Protocol, 2)
	// Stop at the Lambda's deadline rather than at the read timeout.
	o.ContextTimeoutEnabled = true
	// No CLIENT SETINFO or CLIENT MAINT_NOTIFICATIONS on connect: each is a
	// round trip on a cold start, and older servers refuse them.
	o.DisableIdentity = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

// isLoopback reports whether host names this machine.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
