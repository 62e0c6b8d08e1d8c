package idempotency

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/observe"
)

// Defaults of Config.
const (
	// DefaultTTL is how long a completed (or in-progress) record lives.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxLease bounds a claim's lease: Lambda's own maximum timeout.
	DefaultMaxLease = 15 * time.Minute
	// DefaultLeaseMargin is added to the invocation's deadline, so that a
	// record is not taken over while its owner is still writing it.
	DefaultLeaseMargin = 2 * time.Second
	// DefaultNamespace is the CloudWatch namespace of the metrics.
	DefaultNamespace = "ichido"
	// DefaultMaxBodyBytes is the largest request body accepted: 6 MiB. That is
	// the most a synchronous Lambda invocation carries, so no request Lambda
	// delivers is refused by default.
	DefaultMaxBodyBytes = 6 << 20
	// DefaultFinishTimeout bounds completing or releasing a record, retries
	// included.
	DefaultFinishTimeout = 5 * time.Second
)

// DefaultMethods are the methods protected when Config.Methods is empty.
var DefaultMethods = []string{http.MethodPost, http.MethodPatch, http.MethodDelete}

// SubjectFunc returns the authenticated user of a request. It must read only
// what authenticated the request, never a header or body field that a client
// sets freely. That is API Gateway's authorizer, a Function URL's IAM check, or
// a verified token (IAMPrincipal, ALBOIDC, BearerToken). It returns "" (or an
// error, which is logged and never shown to the client) when there is no user;
// the decorator then answers 401. The result is the subject as the identity
// provider issued it (IssuerSubject with its issuer where several reach one
// store): the decorator keeps SubjectUUID of it.
type SubjectFunc func(ctx context.Context, req Request) (string, error)

// ClaimsSubject is the default SubjectFunc: the "sub" claim of a JWT
// authorizer (v2 requestContext.authorizer.jwt.claims.sub) or of a Cognito
// user pool authorizer (v1 requestContext.authorizer.claims.sub).
func ClaimsSubject(_ context.Context, req Request) (string, error) {
	return req.Claims["sub"], nil
}

// AuthorizerContextField returns a SubjectFunc that reads the string field
// name of a Lambda authorizer's context (v2 requestContext.authorizer.lambda,
// v1 requestContext.authorizer, e.g. "principalId").
func AuthorizerContextField(name string) SubjectFunc {
	return func(_ context.Context, req Request) (string, error) {
		s, _ := req.AuthorizerContext[name].(string)
		return s, nil
	}
}

// Settings are what every shape shares: how long records and leases last,
// waiting duplicates, the local cache, the replay hook, and where the log
// and metric lines go. Config and FunctionConfig embed them; each field
// means the same on every shape, and its zero value takes the default it
// documents.
type Settings struct {
	// TTL is how long a record lives after its claim and after its
	// completion. Make it longer than the latest a repeat can arrive (for
	// SQS, the queue's retention). Defaults to 24h (DefaultTTL).
	TTL time.Duration

	// MaxLease bounds a claim's lease. A run with a deadline (every Lambda
	// invocation) holds its record until the deadline plus LeaseMargin,
	// never past now + MaxLease. Defaults to 15m (DefaultMaxLease).
	MaxLease time.Duration

	// LeaseMargin is added to the run's deadline. Defaults to 2s
	// (DefaultLeaseMargin).
	LeaseMargin time.Duration

	// Heartbeat is the lease of a run without a deadline (a net/http request, a
	// call outside Lambda). It is renewed every third of it: a crashed server
	// frees its key within one Heartbeat. A run is cancelled when its lease is
	// lost, or when no renewal succeeded for Heartbeat less min(LeaseMargin,
	// Heartbeat/3). Its cause wraps idemstore.ErrLeaseLost. Defaults to 30s
	// (DefaultHeartbeat). HeartbeatOff turns renewal off: the lease is now +
	// MaxLease.
	Heartbeat time.Duration

	// HeartbeatLongRuns renews the lease of a run with a deadline too, when
	// the deadline's lease would be longer than Heartbeat. Defaults to false.
	HeartbeatLongRuns bool

	// WaitForResult is how long a duplicate of the same request, finding its
	// key in progress, waits for the first run's answer. It never waits past
	// its own deadline. It polls the store and replays the answer instead of
	// answering 409 (ErrInProgress for a Function). Defaults to 0: no wait.
	WaitForResult time.Duration

	// LocalCache keeps completed records in this execution environment's
	// memory, so that a repeat is answered without a store round trip. Defaults
	// to nil (no cache). &LocalCache{} turns it on.
	LocalCache *LocalCache

	// FinishTimeout bounds completing or releasing a record after the run,
	// retries included. Defaults to 5s (DefaultFinishTimeout).
	FinishTimeout time.Duration

	// KeyPrefix scopes the keys, so that several services can share one
	// store: the same key under two prefixes names two records. At most 64
	// visible ASCII characters, no ':'; keep it stable. Defaults to "".
	KeyPrefix string

	// AllowMissingKey lets a run without a key go unprotected: it runs,
	// nothing is claimed or stored, and it is logged with the outcome
	// "unprotected". A malformed key is still refused. Defaults to false:
	// 400 idempotency_key_missing, or ErrNoKey for a function.
	AllowMissingKey bool

	// OnReplay, when set, is called on every replay with the stored response
	// and the record's times. For an HTTP shape it may change the replay's
	// headers (Replay.Header). Defaults to nil.
	OnReplay func(ctx context.Context, r *Replay)

	// Tenant returns the tenant a run belongs to: records of two tenants
	// never meet, whatever their users and keys (TenantUserID). Defaults to
	// the tenant of a Lambda invocation in tenant isolation mode
	// (lambdacontext's TenantID), and "" (no tenant) elsewhere.
	Tenant func(ctx context.Context) string

	// RequireTenant refuses a run whose Tenant is "" (401, or ErrNoTenant).
	// Defaults to false: such a run has no tenant.
	RequireTenant bool

	// Drain, when set, lets a stopping server finish or release its runs
	// (Drain.Shutdown). Defaults to nil.
	Drain *Drain

	// Owner returns a run's owner token, unique per run. The store fences the
	// record's writes by it. Defaults to the Lambda request id (plus a random
	// suffix per function call, since an SQS batch makes many), or a random
	// token outside Lambda.
	Owner func(ctx context.Context) string

	// Clock returns the current time. Defaults to time.Now.
	Clock func() time.Time

	// Logger receives one line per protected run. Defaults to a JSON
	// logger on standard output.
	Logger *slog.Logger

	// Metrics receives one CloudWatch Embedded Metric Format line per run.
	// Defaults to standard output in Lambda, else io.Discard.
	Metrics io.Writer

	// LogDigestSecret, when set (32 bytes or more), makes the log line show
	// keyed digests of the key and the user (observe.Digest), not their
	// values. Defaults to nil: the values.
	LogDigestSecret []byte

	// Observer, when set, gets a span of every protected call (otelidem's:
	// OpenTelemetry). Defaults to nil: none.
	Observer observe.Observer

	// Namespace is the metrics' CloudWatch namespace. Defaults to "ichido"
	// (DefaultNamespace).
	Namespace string
}

// withDefaults returns a copy of s with every zero field set to its
// default; owner is the shape's default owner token.
func (s Settings) withDefaults(owner func(context.Context) string) Settings {
	if s.TTL == 0 {
		s.TTL = DefaultTTL
	}
	if s.MaxLease == 0 {
		s.MaxLease = DefaultMaxLease
	}
	if s.LeaseMargin == 0 {
		s.LeaseMargin = DefaultLeaseMargin
	}
	if s.Heartbeat == 0 {
		s.Heartbeat = DefaultHeartbeat
	}
	if s.FinishTimeout == 0 {
		s.FinishTimeout = DefaultFinishTimeout
	}
	if s.Tenant == nil {
		s.Tenant = lambdaTenant
	}
	if s.Owner == nil {
		s.Owner = owner
	}
	if s.Clock == nil {
		s.Clock = time.Now
	}
	if s.Logger == nil {
		s.Logger = slog.New(slog.NewJSONHandler(os.Stdout, nil))
	}
	if s.Metrics == nil {
		s.Metrics = io.Discard
		if inLambda() {
			s.Metrics = os.Stdout
		}
	}
	if s.Namespace == "" {
		s.Namespace = DefaultNamespace
	}
	return s
}

// validate reports every problem of defaulted Settings; typeName starts
// each message, so that it names the field as the caller wrote it.
func (s Settings) validate(typeName string) []error {
	var errs []error
	negative := func(field string, v, def time.Duration) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s.%s is %v: use a positive duration, or 0 for the default %v", typeName, field, v, def))
		}
	}
	negative("TTL", s.TTL, DefaultTTL)
	negative("MaxLease", s.MaxLease, DefaultMaxLease)
	negative("LeaseMargin", s.LeaseMargin, DefaultLeaseMargin)
	negative("FinishTimeout", s.FinishTimeout, DefaultFinishTimeout)
	if s.TTL > 0 && s.MaxLease > s.TTL {
		errs = append(errs, fmt.Errorf("%[1]s.MaxLease (%[2]v) is longer than %[1]s.TTL (%[3]v): a record would expire while its lease still protects it; raise TTL or lower MaxLease", typeName, s.MaxLease, s.TTL))
	}
	if s.Heartbeat < 0 && s.Heartbeat != HeartbeatOff {
		errs = append(errs, fmt.Errorf("%s.Heartbeat is %v: use a positive duration, 0 for the default %v, or HeartbeatOff", typeName, s.Heartbeat, DefaultHeartbeat))
	}
	if s.Heartbeat > 0 && s.Heartbeat < heartbeatBeats*time.Millisecond {
		errs = append(errs, fmt.Errorf("%s.Heartbeat is %v: use at least %v", typeName, s.Heartbeat, heartbeatBeats*time.Millisecond))
	}
	if s.WaitForResult < 0 {
		errs = append(errs, fmt.Errorf("%s.WaitForResult is %v: use a positive duration, or 0 for no wait", typeName, s.WaitForResult))
	}
	if c := s.LocalCache; c != nil && (c.MaxEntries < 0 || c.MaxBytes < 0) {
		errs = append(errs, fmt.Errorf("%s.LocalCache bounds are %d entries and %d bytes: use positive numbers, or 0 for the defaults %d and %d", typeName, c.MaxEntries, c.MaxBytes, DefaultCacheEntries, DefaultCacheBytes))
	}
	if n := len(s.LogDigestSecret); n > 0 && n < 32 {
		errs = append(errs, fmt.Errorf("%s.LogDigestSecret is %d bytes: use at least 32 random bytes", typeName, n))
	}
	if err := validateKeyPrefix(typeName, s.KeyPrefix); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// Config configures Wrap and Middleware. The zero value of every field but
// Store takes the documented default.
type Config struct {
	// Store keeps the records. Required.
	Store idemstore.Store

	// Methods are the HTTP methods whose requests are protected. Other methods
	// pass straight through without touching the Store. GET, HEAD and OPTIONS
	// are safe and cannot be listed. Defaults to POST, PATCH and DELETE
	// (DefaultMethods). Add PUT if your PUT handlers need it.
	Methods []string

	// Key says where a request's key is read: a header (HeaderKey), a path
	// parameter (PathKey), a body field (BodyKey), or a KeyFunc of your
	// own. Defaults to the Idempotency-Key header (HeaderKey(HeaderName)).
	Key KeySource

	// KeyFormat is what a key must look like: KeyUUIDv4 (a UUID version 4)
	// or KeyOpaque (1 to 255 visible ASCII characters, Stripe's rule).
	// Defaults to KeyUUIDv4.
	KeyFormat KeyFormat

	// Subject returns the authenticated caller's subject, which SubjectUUID
	// maps to the user id kept. Defaults to ClaimsSubject; use
	// AuthorizerContextField, or your own function, for a Lambda authorizer.
	Subject SubjectFunc

	// Fingerprint returns the fingerprint kept with a record. A request with a
	// known key and another fingerprint is refused with 422. Defaults to
	// Fingerprint (method, path, query and body). FingerprintBody covers parts
	// of a body.
	Fingerprint FingerprintFunc

	// MaxBodyBytes is the largest request body accepted, in bytes, on every
	// shape (a Lambda event's base64 body counts as the bytes it decodes to). A
	// larger body is refused with 413 "payload_too_large" before anything else:
	// no fingerprint, store call, record or run. Defaults to 6 MiB
	// (DefaultMaxBodyBytes), which no Lambda event's body can exceed; lower it
	// to the largest body your API accepts.
	MaxBodyBytes int

	// ReplayHeaders lists response headers kept for replay besides
	// Content-Type, Content-Encoding and Location, which are always kept.
	// Set-Cookie may be listed: each cookie then replays as the cookie it
	// was, byte for byte. Defaults to none.
	ReplayHeaders []string

	Settings
}

// withDefaults returns a copy of c with every zero field set to its default
// and names normalised.
func (c Config) withDefaults() Config {
	c.Settings = c.Settings.withDefaults(defaultOwner)
	if len(c.Methods) == 0 {
		c.Methods = DefaultMethods
	}
	methods := make([]string, len(c.Methods))
	for i, m := range c.Methods {
		methods[i] = strings.ToUpper(strings.TrimSpace(m))
	}
	c.Methods = methods
	if c.Key == nil {
		c.Key = HeaderKey(HeaderName)
	}
	if c.Fingerprint == nil {
		c.Fingerprint = Fingerprint
	}
	if c.Subject == nil {
		c.Subject = ClaimsSubject
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return c
}

// validate reports every problem of a defaulted Config at once.
func (c Config) validate() error {
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("Config.Store is nil: pass a Store, e.g. pgstore.New(pool, nil)"))
	}
	for _, m := range c.Methods {
		switch {
		case m == "" || strings.ContainsFunc(m, func(r rune) bool { return r <= ' ' || r >= 0x7f }):
			errs = append(errs, fmt.Errorf("Config.Methods holds %q, which is not an HTTP method", m))
		case m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions:
			errs = append(errs, fmt.Errorf("Config.Methods holds %s, a safe method that always passes through; remove it", m))
		}
	}
	errs = append(errs, c.Settings.validate("Config")...)
	if c.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("Config.MaxBodyBytes is %d: use a positive size, or 0 for the default %d", c.MaxBodyBytes, DefaultMaxBodyBytes))
	}
	for _, h := range c.ReplayHeaders {
		if h == "" || strings.ContainsAny(h, " \t\r\n:") {
			errs = append(errs, fmt.Errorf("Config.ReplayHeaders holds %q, which is not a header name", h))
		}
	}
	if h, ok := c.Key.(headerKey); ok && !validHeaderName(string(h)) {
		errs = append(errs, fmt.Errorf("Config.Key is HeaderKey(%q), which is not a header name", string(h)))
	}
	if c.KeyFormat != KeyUUIDv4 && c.KeyFormat != KeyOpaque {
		errs = append(errs, fmt.Errorf("Config.KeyFormat is %v: use KeyUUIDv4 or KeyOpaque", c.KeyFormat))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("idempotency: invalid Config: %w", errors.Join(errs...))
}

// validHeaderName reports whether name can be an HTTP header's name.
func validHeaderName(name string) bool {
	return name != "" && !strings.ContainsFunc(name, func(r rune) bool { return r <= ' ' || r >= 0x7f || r == ':' })
}

// replayHeaderNames returns the canonical names of the headers kept for
// replay.
func (c Config) replayHeaderNames() []string {
	names := []string{"Content-Type", "Content-Encoding", "Location"}
	for _, h := range c.ReplayHeaders {
		h = http.CanonicalHeaderKey(h)
		if !slices.Contains(names, h) {
			names = append(names, h)
		}
	}
	return names
}

// inLambda reports whether the process runs in Lambda, whose runtime sets
// AWS_LAMBDA_FUNCTION_NAME.
func inLambda() bool { return os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" }

func defaultOwner(ctx context.Context) string {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		return lc.AwsRequestID
	}
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return hex.EncodeToString(b[:])
}
