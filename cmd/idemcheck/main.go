// Command idemcheck is a black-box checker of the Idempotency-Key contract:
// given an API's base URL and one request that the API protects, it drives
// the API over HTTP through the contract and prints one verdict per check.
// It knows nothing of how the API is built, so it checks any implementation
// (ichido's, Stripe-style ones, your own); its expectations are flags, and
// no flag turns off the checks that a request runs once.
//
//	idemcheck -url https://api.example.com -path /tasks \
//	  -body '{"title":"check {{unique}}"}' -H 'Authorization: Bearer ${TOKEN}'
//
// The checks, each printed as PASS, FAIL or SKIP with one line of why:
//
//	first-request  a new key: 2xx, not marked as a replay
//	rerun-visible  a re-run can be told from a replay: the same request with
//	               another key answers otherwise, or -count-url counts runs;
//	               when neither holds, it fails
//	replay         the same key and request again: the same status, body byte
//	               for byte, Content-Type and Location, the replay marker
//	               (-replay-header), and no run (the counter did not move)
//	mismatch       the same key with another request: 422
//	quoted-key     a new key sent as the IETF draft's sf-string ("…") runs;
//	               the key bare, then quoted again, replays it
//	per-user       with -H2: a second user's request with the first user's key
//	               runs for that user
//	concurrent     -concurrent requests with one new key at once, in up to
//	               -bursts bursts, until a 409 shows that a duplicate arrived
//	               while the first ran: the 2xx answers are one answer, a later
//	               retry gets it, the counter moved by one. Without a 409 in
//	               any burst it says it could not show an overlap (SKIP)
//	missing-key    no key: 400 (-missing-key=allow: 2xx)
//	malformed-key  -malformed-key as the key: 400
//	cleanup        with -delete-created: DELETE of every Location created
//
// Refusals (400, 409, 422) are checked against -problem: rfc9457 wants
// application/problem+json; ichido wants ichido's fields and codes too;
// off checks the status alone. Each {{unique}} in -body is replaced by a
// value of its own per logical request (a first request and its retries
// share one), which gives the mismatch check its other body. ${NAME} in a
// -H or -H2 value is read from the environment, so that a token stays out
// of the command line. A DELETE acts on a resource of its own per logical
// request, which -create-path makes.
//
// It exits 0 when no check failed, 1 when one did, 2 on a usage error.
// docs/smoke.md explains each check, which follow the IETF draft and which
// ichido's own choices, and how to point it at another implementation.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idemcheck:", err)
	}
	os.Exit(code)
}

// headerList is the repeatable -H flag.
type headerList []string

func (h *headerList) String() string     { return strings.Join(*h, ", ") }
func (h *headerList) Set(v string) error { *h = append(*h, v); return nil }

// errUsage marks an error that is the caller's to fix: exit status 2.
var errUsage = errors.New("usage")

// run parses args, runs the checks and prints them; it returns the exit
// status.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (int, error) {
	cfg, err := parseFlags(args, getenv, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0, nil
	}
	if err != nil {
		return 2, err
	}
	results := Run(ctx, cfg)
	return Print(stdout, results), nil
}

// Print writes one line per result and a summary line; it returns 1 when
// a check failed, else 0.
func Print(w io.Writer, results []Result) int {
	counts := map[Verdict]int{}
	for _, r := range results {
		counts[r.Verdict]++
		fmt.Fprintf(w, "%-4s  %-14s %s\n", r.Verdict, r.Name, r.Why)
	}
	fmt.Fprintf(w, "idemcheck: %d passed, %d failed, %d skipped\n", counts[Pass], counts[Fail], counts[Skip])
	if counts[Fail] > 0 {
		return 1
	}
	return 0
}

func parseFlags(args []string, getenv func(string) string, stderr io.Writer) (Config, error) {
	fs := flag.NewFlagSet("idemcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: idemcheck -url BASE -path PATH [flags]

Drives an API through the Idempotency-Key contract with one protected
request and prints PASS, FAIL or SKIP per check: first-request,
rerun-visible, replay, mismatch, quoted-key, per-user (with -H2),
concurrent, missing-key, malformed-key (and cleanup with -delete-created).
Exit status 1 when a check fails, 2 on a usage error.

Example (ichido's sample task API):

  TOKEN=… idemcheck -url http://127.0.0.1:3000 -path /tasks \
    -body '{"title":"check {{unique}}"}' -H 'Authorization: Bearer ${TOKEN}' \
    -problem ichido -delete-created

Flags:
`)
		fs.PrintDefaults()
	}
	var headers, other headerList
	var cfg Config
	fs.StringVar(&cfg.BaseURL, "url", "", "the API's base URL (required), e.g. https://abc.execute-api.eu-west-1.amazonaws.com")
	fs.StringVar(&cfg.Method, "method", "POST", "the protected method to check")
	fs.StringVar(&cfg.Path, "path", "", "the resource's path (required), e.g. /tasks")
	fs.StringVar(&cfg.Body, "body", "", "the request body; each {{unique}} becomes a value of its own per logical request")
	fs.StringVar(&cfg.MismatchBody, "mismatch-body", "", "the other body for the mismatch check (default: -body with another {{unique}})")
	fs.Var(&headers, "H", "a header sent with every request, 'Name: value' (repeatable); ${NAME} in the value is read from the environment")
	fs.Var(&other, "H2", "a second user's credentials, 'Name: value' (repeatable), sent in place of -H's header of that name by the per-user check")
	fs.StringVar(&cfg.CountURL, "count-url", "", "a URL whose GET answers how many times the request has run (a JSON number or {\"count\": n}); the checks then watch it")
	fs.StringVar(&cfg.CreatePath, "create-path", "", "for a method that acts on one resource (DELETE): where a POST of -create-body makes a fresh one per logical request; its Location is the path")
	fs.StringVar(&cfg.CreateBody, "create-body", "", "the body of the -create-path POST ({{unique}} as in -body)")
	fs.IntVar(&cfg.Bursts, "bursts", 10, "how many bursts the concurrent check tries to show a duplicate arriving while the first runs")
	fs.StringVar(&cfg.KeyHeader, "key-header", "Idempotency-Key", "the header that carries the key")
	replay := fs.String("replay-header", "Idempotent-Replayed: true", "the header that marks a replay, 'Name: value' or 'Name' (any value); empty checks no marker")
	fs.StringVar(&cfg.Problem, "problem", ProblemRFC9457, "the format of the 400, 409 and 422 refusals: rfc9457 (application/problem+json), ichido (also its fields and codes) or off (status alone)")
	missing := fs.String("missing-key", "reject", "what a request without a key gets: reject (400) or allow (runs unprotected, 2xx)")
	fs.StringVar(&cfg.MalformedKey, "malformed-key", DefaultMalformedKey, "the key the malformed-key check sends (it must be invalid for the API; the default is an unterminated sf-string, invalid under the IETF draft); empty skips the check")
	fs.IntVar(&cfg.Concurrent, "concurrent", 2, "how many requests with one key the concurrent check sends at once (at least 2)")
	fs.BoolVar(&cfg.RetryAfter, "retry-after", true, "require Retry-After on a 409")
	fs.DurationVar(&cfg.Timeout, "timeout", 30*time.Second, "the longest wait for one answer")
	fs.BoolVar(&cfg.DeleteCreated, "delete-created", false, "at the end, DELETE every Location a successful request returned (with a key of its own)")
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: unexpected arguments %q", errUsage, fs.Args())
	}
	if u, err := url.Parse(cfg.BaseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return cfg, fmt.Errorf("%w: -url must be an http or https base URL, got %q", errUsage, cfg.BaseURL)
	}
	if !strings.HasPrefix(cfg.Path, "/") {
		return cfg, fmt.Errorf("%w: -path must start with /, got %q", errUsage, cfg.Path)
	}
	switch cfg.Problem {
	case ProblemOff, ProblemRFC9457, ProblemIchido:
	default:
		return cfg, fmt.Errorf("%w: -problem is %q: use rfc9457, ichido or off", errUsage, cfg.Problem)
	}
	switch *missing {
	case "reject":
	case "allow":
		cfg.AllowMissingKey = true
	default:
		return cfg, fmt.Errorf("%w: -missing-key is %q: use reject or allow", errUsage, *missing)
	}
	if cfg.Concurrent < 2 {
		return cfg, fmt.Errorf("%w: -concurrent must be at least 2, got %d", errUsage, cfg.Concurrent)
	}
	if cfg.KeyHeader == "" {
		return cfg, fmt.Errorf("%w: -key-header is empty", errUsage)
	}
	if cfg.Bursts < 1 {
		return cfg, fmt.Errorf("%w: -bursts must be at least 1, got %d", errUsage, cfg.Bursts)
	}
	if strings.EqualFold(cfg.Method, http.MethodDelete) && cfg.CreatePath == "" {
		return cfg, fmt.Errorf("%w: -method DELETE needs a resource of its own per logical request: give -create-path (and -create-body)", errUsage)
	}
	if cfg.CreatePath != "" && !strings.HasPrefix(cfg.CreatePath, "/") {
		return cfg, fmt.Errorf("%w: -create-path must start with /, got %q", errUsage, cfg.CreatePath)
	}
	if cfg.CountURL != "" {
		if u, err := url.Parse(cfg.CountURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, fmt.Errorf("%w: -count-url must be an http or https URL, got %q", errUsage, cfg.CountURL)
		}
	}
	cfg.Method = strings.ToUpper(cfg.Method)
	if r := strings.TrimSpace(*replay); r != "" {
		name, value, _ := strings.Cut(r, ":")
		cfg.ReplayHeader, cfg.ReplayValue = strings.TrimSpace(name), strings.TrimSpace(value)
	}
	var err error
	if cfg.Header, err = parseHeaders("-H", headers, cfg.KeyHeader, getenv); err != nil {
		return cfg, err
	}
	if len(other) > 0 {
		if cfg.OtherUser, err = parseHeaders("-H2", other, cfg.KeyHeader, getenv); err != nil {
			return cfg, err
		}
	}
	if cfg.Body != "" && cfg.Header.Get("Content-Type") == "" {
		cfg.Header.Set("Content-Type", "application/json")
	}
	return cfg, nil
}

// parseHeaders reads 'Name: value' flags. The key header is refused:
// idemcheck sends its own keys.
func parseHeaders(flagName string, list []string, keyHeader string, getenv func(string) string) (http.Header, error) {
	h := http.Header{}
	for _, line := range list {
		name, value, ok := strings.Cut(line, ":")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: %s %q is not 'Name: value'", errUsage, flagName, line)
		}
		if strings.EqualFold(name, keyHeader) {
			return nil, fmt.Errorf("%w: %s sets %s, which idemcheck sends itself (a new key per logical request)", errUsage, flagName, keyHeader)
		}
		value, err := expandEnv(strings.TrimSpace(value), getenv)
		if err != nil {
			return nil, err
		}
		h.Add(name, value)
	}
	return h, nil
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expandEnv replaces each ${NAME} by the variable's value; an unset or
// empty variable is an error, so that an empty token is not sent.
func expandEnv(s string, getenv func(string) string) (string, error) {
	var missing []string
	out := envRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := envRef.FindStringSubmatch(ref)[1]
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("%w: a header flag refers to %s, which is not set", errUsage, strings.Join(missing, ", "))
	}
	return out, nil
}
