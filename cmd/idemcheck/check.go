package main

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Verdict is the outcome of one check.
type Verdict string

// The verdicts. A SKIP is never silent: its line says why the check did not
// run, or what it could not show.
const (
	Pass Verdict = "PASS"
	Fail Verdict = "FAIL"
	Skip Verdict = "SKIP"
)

// Result is one check's verdict and its one line of why.
type Result struct {
	Name    string
	Verdict Verdict
	Why     string
}

// The checks, in the order they run.
const (
	checkFirst     = "first-request"
	checkRerun     = "rerun-visible"
	checkReplay    = "replay"
	checkMismatch  = "mismatch"
	checkQuoted    = "quoted-key"
	checkUsers     = "per-user"
	checkConcur    = "concurrent"
	checkMissing   = "missing-key"
	checkMalformed = "malformed-key"
	checkCleanup   = "cleanup"
)

// Problem formats the refusals (400, 409, 422) are checked against.
const (
	// ProblemOff checks the status alone.
	ProblemOff = "off"
	// ProblemRFC9457 wants Content-Type application/problem+json and a JSON
	// object whose "status", when present, is the response's status.
	ProblemRFC9457 = "rfc9457"
	// ProblemIchido wants RFC 9457 with type, title, status and detail, and
	// ichido's machine-readable code (idempotency_key_missing, …).
	ProblemIchido = "ichido"
)

// uniquePlaceholder is replaced in a body template by a value of its own
// for each logical request (a first request and its retries share one).
const uniquePlaceholder = "{{unique}}"

// defaultMarker is ichido's replay marker. Whatever -replay-header says, a
// first run that carries it with the value true fails.
const defaultMarker = "Idempotent-Replayed"

// DefaultMalformedKey is the malformed-key check's key: an sf-string that
// is never closed, which the IETF draft's structured-field syntax refuses
// whatever key rule an API adds.
const DefaultMalformedKey = `"unterminated`

// Config says which request to make and what the API is expected to answer.
type Config struct {
	// BaseURL is the API's base URL, such as https://abc.execute-api.eu-west-1.amazonaws.com.
	BaseURL string
	// Method is the protected method. Defaults to POST.
	Method string
	// Path is the resource's path, such as /tasks. With CreatePath it is
	// ignored: each logical request targets a resource of its own.
	Path string
	// Body is the request body; each {{unique}} in it is replaced by a value
	// of its own per logical request. Empty sends no body.
	Body string
	// MismatchBody is the body sent with a used key to provoke a 422.
	// Defaults to Body rendered with another {{unique}} value, or, with
	// CreatePath, the same body on another resource.
	MismatchBody string
	// CreatePath, for a method that acts on one resource (DELETE, PUT,
	// PATCH), is where a POST of CreateBody makes a fresh resource for each
	// logical request; its Location is the request's path.
	CreatePath, CreateBody string
	// Header is sent with every request (Authorization, Content-Type, …).
	// It must not hold the key header.
	Header http.Header
	// OtherUser, when set, is the header of a second user's credentials
	// (replacing those names of Header): the per-user check sends it.
	OtherUser http.Header
	// KeyHeader names the key's header. Defaults to Idempotency-Key.
	KeyHeader string
	// ReplayHeader names the header that marks a replayed response; empty
	// checks no marker on replays. ReplayValue is the value it must have;
	// empty accepts any value.
	ReplayHeader, ReplayValue string
	// CountURL, when set, is a URL whose GET answers how many times the
	// protected request has run (a JSON number, or an object with a
	// numeric "count"). The checks then watch it instead of relying on a
	// re-run's answer being another.
	CountURL string
	// Problem is the format of the refusals: ProblemOff, ProblemRFC9457 or
	// ProblemIchido. Defaults to ProblemRFC9457.
	Problem string
	// AllowMissingKey expects a request without a key to run unprotected
	// (2xx) instead of being refused with 400.
	AllowMissingKey bool
	// MalformedKey is the key the malformed-key check sends; empty skips
	// that check. The command line defaults it to DefaultMalformedKey.
	MalformedKey string
	// Concurrent is how many requests with one key the concurrent check
	// starts at once. Defaults to 2.
	Concurrent int
	// Bursts is how many bursts the concurrent check tries before it says
	// that it could not show an overlap. Defaults to 10.
	Bursts int
	// RetryAfter requires Retry-After on a 409.
	RetryAfter bool
	// Timeout bounds each request. Defaults to 30 seconds.
	Timeout time.Duration
	// DeleteCreated deletes, at the end, every resource a successful
	// request named in its Location header (DELETE with a key of its own).
	DeleteCreated bool
	// Client makes the requests. Defaults to a client with Timeout.
	Client *http.Client
}

// checker runs the checks of one Config.
type checker struct {
	cfg       Config
	mu        sync.Mutex
	created   []string      // Location headers of successful runs
	createdBy []http.Header // whose credentials made each
	// visible is how a re-run shows: "counter", "answer", or "" when it
	// cannot be seen.
	visible string
}

// response is one answer.
type response struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

func (r response) ok() bool { return r.status >= 200 && r.status < 300 }

// same reports whether two answers are one answer: status, body byte for
// byte, Content-Type and Location.
func (r response) same(o response) bool {
	return r.status == o.status && bytes.Equal(r.body, o.body) &&
		r.header.Get("Content-Type") == o.header.Get("Content-Type") && r.header.Get("Location") == o.header.Get("Location")
}

// short is a response in fewer words than summary.
func (r response) short() string {
	s := r.summary()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// summary is a response in a few words: status and the start of the body.
func (r response) summary() string {
	b := strings.Join(strings.Fields(string(r.body)), " ")
	if len(b) > 120 {
		b = b[:120] + "…"
	}
	if b == "" {
		return strconv.Itoa(r.status)
	}
	return fmt.Sprintf("%d %s", r.status, b)
}

// request is one logical request: its target, its body and its key.
type request struct {
	path, body, key string
}

// Run drives the API through every check and returns their results in
// order. It stops early only when ctx is done.
func Run(ctx context.Context, cfg Config) []Result {
	if cfg.Method == "" {
		cfg.Method = http.MethodPost
	}
	if cfg.KeyHeader == "" {
		cfg.KeyHeader = "Idempotency-Key"
	}
	if cfg.Problem == "" {
		cfg.Problem = ProblemRFC9457
	}
	if cfg.Concurrent < 2 {
		cfg.Concurrent = 2
	}
	if cfg.Bursts <= 0 {
		cfg.Bursts = 10
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Client == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = cfg.Concurrent + 2
		cfg.Client = &http.Client{Timeout: cfg.Timeout, Transport: tr}
	}
	c := &checker{cfg: cfg}
	var out []Result
	first, err := c.newRequest(ctx, nil)
	if err != nil {
		return append(out, Result{checkFirst, Fail, err.Error()})
	}
	firstResp, firstOK := c.first(ctx, first, &out)
	if firstOK {
		out = append(out, c.rerunVisible(ctx, first, firstResp))
		out = append(out, c.replay(ctx, first, firstResp), c.mismatch(ctx, first), c.quoted(ctx), c.users(ctx, first, firstResp), c.concurrent(ctx))
	} else {
		why := "the first request did not succeed, so there is nothing to replay"
		for _, name := range []string{checkRerun, checkReplay, checkMismatch, checkQuoted, checkUsers, checkConcur} {
			out = append(out, Result{name, Skip, why})
		}
	}
	out = append(out, c.missing(ctx), c.malformed(ctx))
	if cfg.DeleteCreated {
		out = append(out, c.cleanup(ctx))
	}
	return out
}

// newRequest makes a logical request: a fresh key and body, and with
// CreatePath a fresh resource to act on, created with the credentials as
// (nil: Header's).
func (c *checker) newRequest(ctx context.Context, as http.Header) (request, error) {
	q := request{path: c.cfg.Path, body: c.render(), key: newKey()}
	if c.cfg.CreatePath == "" {
		return q, nil
	}
	key := newKey()
	r, err := c.send(ctx, http.MethodPost, c.cfg.CreatePath, &key, c.renderTemplate(c.cfg.CreateBody), as)
	if err != nil {
		return q, fmt.Errorf("creating a resource to %s: %w", c.cfg.Method, err)
	}
	loc := r.header.Get("Location")
	if !r.ok() || loc == "" {
		return q, fmt.Errorf("creating a resource to %s: POST %s answered %s with Location %q, want 2xx naming the resource", c.cfg.Method, c.cfg.CreatePath, r.summary(), loc)
	}
	c.keep(loc, as)
	q.path = loc
	return q, nil
}

// count reads the run counter; ok is false without one.
func (c *checker) count(ctx context.Context) (n int64, ok bool, err error) {
	if c.cfg.CountURL == "" {
		return 0, false, nil
	}
	r, err := c.send(ctx, http.MethodGet, c.cfg.CountURL, nil, "", nil)
	if err != nil {
		return 0, true, fmt.Errorf("reading the counter: %w", err)
	}
	if r.status != http.StatusOK {
		return 0, true, fmt.Errorf("reading the counter: GET %s answered %s", c.cfg.CountURL, r.summary())
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		return 0, true, fmt.Errorf("reading the counter: not JSON: %s", r.summary())
	}
	if m, isObj := v.(map[string]any); isObj {
		v = m["count"]
	}
	f, isNum := v.(float64)
	if !isNum {
		return 0, true, fmt.Errorf("reading the counter: want a number or {\"count\": number}, got %s", r.summary())
	}
	return int64(f), true, nil
}

// ranSince says how many runs the counter saw since before; ok is false
// without a counter.
func (c *checker) ranSince(ctx context.Context, before int64) (int64, bool, error) {
	now, ok, err := c.count(ctx)
	return now - before, ok, err
}

func (c *checker) first(ctx context.Context, q request, out *[]Result) (response, bool) {
	before, _, err := c.count(ctx)
	if err != nil {
		*out = append(*out, Result{checkFirst, Fail, err.Error()})
		return response{}, false
	}
	r, err := c.send(ctx, c.cfg.Method, q.path, &q.key, q.body, nil)
	if err != nil {
		*out = append(*out, Result{checkFirst, Fail, err.Error()})
		return r, false
	}
	if !r.ok() {
		*out = append(*out, Result{checkFirst, Fail, fmt.Sprintf("%s %s with a new key answered %s, not 2xx", c.cfg.Method, q.path, r.summary())})
		return r, false
	}
	c.remember(r)
	if m := c.firstRunMarker(r); m != "" {
		*out = append(*out, Result{checkFirst, Fail, fmt.Sprintf("answered %d but marked %s on a first run", r.status, m)})
		return r, true
	}
	if ran, ok, err := c.ranSince(ctx, before); err != nil || (ok && ran != 1) {
		why := fmt.Sprintf("the counter moved by %d for one first request, not 1", ran)
		if err != nil {
			why = err.Error()
		}
		*out = append(*out, Result{checkFirst, Fail, why})
		return r, true
	}
	*out = append(*out, Result{checkFirst, Pass, fmt.Sprintf("%s %s with a new key: %d in %s", c.cfg.Method, q.path, r.status, r.elapsed.Round(time.Millisecond))})
	return r, true
}

// rerunVisible shows that a request that runs again can be told from a
// replay: by the counter, or by sending the same request with another key
// (what a re-run is) and seeing another answer. Without either, no check
// can tell a replay from a re-run, and this check fails.
func (c *checker) rerunVisible(ctx context.Context, first request, firstResp response) Result {
	if c.cfg.CountURL != "" {
		c.visible = "counter"
		return Result{checkRerun, Pass, "a re-run shows on the counter " + c.cfg.CountURL}
	}
	key := newKey()
	r, err := c.send(ctx, c.cfg.Method, first.path, &key, first.body, nil)
	if err != nil {
		return Result{checkRerun, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if r.same(firstResp) {
		return Result{checkRerun, Fail, fmt.Sprintf("the same request with another key (a second run) answered byte for byte as the first (%s): a replay cannot be told from a re-run; give -count-url", r.summary())}
	}
	c.visible = "answer"
	return Result{checkRerun, Pass, fmt.Sprintf("the same request with another key answers otherwise (%s), so a re-run cannot pass for a replay", r.short())}
}

func (c *checker) replay(ctx context.Context, first request, firstResp response) Result {
	before, _, err := c.count(ctx)
	if err != nil {
		return Result{checkReplay, Fail, err.Error()}
	}
	r, err := c.send(ctx, c.cfg.Method, first.path, &first.key, first.body, nil)
	if err != nil {
		return Result{checkReplay, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	var wrong []string
	if r.status != firstResp.status {
		wrong = append(wrong, fmt.Sprintf("status %d, first %d", r.status, firstResp.status))
	}
	if !bytes.Equal(r.body, firstResp.body) {
		wrong = append(wrong, "another body (the request ran again?): "+r.summary())
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got, want := r.header.Get(h), firstResp.header.Get(h); got != want {
			wrong = append(wrong, fmt.Sprintf("%s %q, first %q", h, got, want))
		}
	}
	if ran, ok, err := c.ranSince(ctx, before); err != nil {
		wrong = append(wrong, err.Error())
	} else if ok && ran != 0 {
		wrong = append(wrong, fmt.Sprintf("the counter moved by %d: the request ran again", ran))
	}
	if c.cfg.ReplayHeader != "" && !c.marked(r) {
		wrong = append(wrong, fmt.Sprintf("no %s", c.markerText()))
	}
	if len(wrong) > 0 {
		return Result{checkReplay, Fail, "the retry with the same key: " + strings.Join(wrong, "; ")}
	}
	how := "the same answer byte for byte"
	if c.cfg.ReplayHeader != "" {
		how += ", " + c.markerText()
	}
	return Result{checkReplay, Pass, fmt.Sprintf("%d, %s, and it did not run again (%s)", r.status, how, c.visible)}
}

func (c *checker) mismatch(ctx context.Context, first request) Result {
	other := request{path: first.path, body: c.cfg.MismatchBody, key: first.key}
	switch {
	case other.body != "":
	case strings.Contains(c.cfg.Body, uniquePlaceholder):
		other.body = c.render()
	case c.cfg.CreatePath != "":
		q, err := c.newRequest(ctx, nil)
		if err != nil {
			return Result{checkMismatch, Fail, err.Error()}
		}
		other.path, other.body = q.path, first.body
	default:
		return Result{checkMismatch, Skip, "no other request to send: give -mismatch-body, put " + uniquePlaceholder + " in -body, or give -create-path"}
	}
	if other.body == first.body && other.path == first.path {
		return Result{checkMismatch, Skip, "the mismatch body is the first request's body"}
	}
	before, _, err := c.count(ctx)
	if err != nil {
		return Result{checkMismatch, Fail, err.Error()}
	}
	r, err := c.send(ctx, c.cfg.Method, other.path, &other.key, other.body, nil)
	if err != nil {
		return Result{checkMismatch, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if r.status != http.StatusUnprocessableEntity {
		return Result{checkMismatch, Fail, fmt.Sprintf("the same key with another request answered %s, not 422", r.summary())}
	}
	if ran, ok, err := c.ranSince(ctx, before); err != nil || (ok && ran != 0) {
		return Result{checkMismatch, Fail, fmt.Sprintf("422, but the counter moved by %d (%v)", ran, err)}
	}
	if p := c.problemIssue(r, "idempotency_key_reused"); p != "" {
		return Result{checkMismatch, Fail, "422, but " + p}
	}
	return Result{checkMismatch, Pass, "the same key with another request: 422" + c.problemNote()}
}

// quoted sends a new key in the IETF draft's form, an sf-string, then the
// same key bare and quoted again: the first runs, the others replay it.
func (c *checker) quoted(ctx context.Context) Result {
	q, err := c.newRequest(ctx, nil)
	if err != nil {
		return Result{checkQuoted, Fail, err.Error()}
	}
	quotedKey := `"` + q.key + `"`
	r, err := c.send(ctx, c.cfg.Method, q.path, &quotedKey, q.body, nil)
	if err != nil {
		return Result{checkQuoted, Fail, err.Error()}
	}
	if !r.ok() {
		return Result{checkQuoted, Fail, fmt.Sprintf("%s: %s (the draft's sf-string form) answered %s, not 2xx", c.cfg.KeyHeader, quotedKey, r.summary())}
	}
	c.remember(r)
	for _, form := range []struct{ name, key string }{{"bare", q.key}, {"quoted", quotedKey}} {
		again, err := c.send(ctx, c.cfg.Method, q.path, &form.key, q.body, nil)
		if err != nil {
			return Result{checkQuoted, Fail, err.Error()}
		}
		if again.ok() {
			c.remember(again)
		}
		if !again.same(r) {
			return Result{checkQuoted, Fail, fmt.Sprintf("the key sent quoted, then %s, answered %s, then %s: the two forms are not one key", form.name, r.summary(), again.summary())}
		}
	}
	return Result{checkQuoted, Pass, fmt.Sprintf("%s: %s ran once; the key bare and quoted again got its answer", c.cfg.KeyHeader, quotedKey)}
}

// users sends the first request's key as a second user: it must run for
// that user (keys are scoped per user), not replay the first user's answer
// or refuse it. With CreatePath the second user acts on a resource of its
// own; otherwise it sends the very same request.
func (c *checker) users(ctx context.Context, first request, firstResp response) Result {
	if c.cfg.OtherUser == nil {
		return Result{checkUsers, Skip, "no second user's credentials (-H2)"}
	}
	q := first
	if c.cfg.CreatePath != "" {
		own, err := c.newRequest(ctx, c.cfg.OtherUser)
		if err != nil {
			return Result{checkUsers, Fail, "as the second user: " + err.Error()}
		}
		q.path = own.path
	}
	before, _, err := c.count(ctx)
	if err != nil {
		return Result{checkUsers, Fail, err.Error()}
	}
	r, err := c.send(ctx, c.cfg.Method, q.path, &q.key, q.body, c.cfg.OtherUser)
	if err != nil {
		return Result{checkUsers, Fail, err.Error()}
	}
	if !r.ok() {
		return Result{checkUsers, Fail, fmt.Sprintf("another user with the first user's key answered %s, not 2xx: the key is not scoped per user", r.summary())}
	}
	c.rememberAs(r, c.cfg.OtherUser)
	// The very same request (no CreatePath) shows a replay of the first
	// user's answer as that answer.
	if c.firstRunMarker(r) != "" || (c.visible == "answer" && c.cfg.CreatePath == "" && r.same(firstResp)) {
		return Result{checkUsers, Fail, "another user with the first user's key got the first user's answer: the key is not scoped per user"}
	}
	if ran, counted, err := c.ranSince(ctx, before); err != nil || (counted && ran != 1) {
		return Result{checkUsers, Fail, fmt.Sprintf("another user with the first user's key: the counter moved by %d, not 1 (%v): the key is not scoped per user", ran, err)}
	}
	return Result{checkUsers, Pass, fmt.Sprintf("another user with the first user's key: a run of its own (%d)", r.status)}
}

// concurrent starts Concurrent requests with one new key at once, in up to
// Bursts bursts, until a 409 shows that a duplicate arrived while the
// first ran. Every 2xx of a burst must be one answer (and the counter move
// by one), and a later retry must get it. Without a 409 in any burst, the
// duplicates may all have come after the first run ended, so the check
// says it could not show an overlap and does not pass.
func (c *checker) concurrent(ctx context.Context) Result {
	n := c.cfg.Concurrent
	var last string
	for burst := 1; burst <= c.cfg.Bursts; burst++ {
		res, overlapped := c.burst(ctx, n)
		if res.Verdict == Fail || overlapped {
			if overlapped && res.Verdict == Pass {
				res.Why += fmt.Sprintf(" (burst %d of at most %d)", burst, c.cfg.Bursts)
			}
			return res
		}
		last = res.Why
	}
	return Result{checkConcur, Skip, fmt.Sprintf("not shown: in %d bursts of %d no duplicate got 409, so none provably arrived while the first ran (%s); a slower handler or a larger -concurrent shows it", c.cfg.Bursts, n, last)}
}

// burst sends one burst and judges it; overlapped is true when a duplicate
// got 409.
func (c *checker) burst(ctx context.Context, n int) (Result, bool) {
	q, err := c.newRequest(ctx, nil)
	if err != nil {
		return Result{checkConcur, Fail, err.Error()}, false
	}
	before, _, err := c.count(ctx)
	if err != nil {
		return Result{checkConcur, Fail, err.Error()}, false
	}
	c.warm(ctx, n)
	answers := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = c.send(ctx, c.cfg.Method, q.path, &q.key, q.body, nil)
		}()
	}
	close(start)
	wg.Wait()
	var ok, conflicts []response
	for i, r := range answers {
		if errs[i] != nil {
			return Result{checkConcur, Fail, errs[i].Error()}, false
		}
		switch {
		case r.ok():
			ok = append(ok, r)
			c.remember(r)
		case r.status == http.StatusConflict:
			conflicts = append(conflicts, r)
		default:
			return Result{checkConcur, Fail, fmt.Sprintf("%d requests with one key at once: one answered %s (want 2xx, or 409 while the first runs)", n, r.summary())}, false
		}
	}
	for _, r := range ok[min(1, len(ok)):] {
		if !r.same(ok[0]) {
			return Result{checkConcur, Fail, fmt.Sprintf("%d requests with one key at once gave different 2xx answers (%s; %s): the request ran more than once", n, ok[0].summary(), r.summary())}, false
		}
	}
	wait := time.Second
	for _, r := range conflicts {
		ra := r.header.Get("Retry-After")
		if c.cfg.RetryAfter && ra == "" {
			return Result{checkConcur, Fail, "a 409 without Retry-After"}, true
		}
		if p := c.problemIssue(r, "idempotency_key_in_use"); p != "" {
			return Result{checkConcur, Fail, "409, but " + p}, true
		}
		if s, err := strconv.Atoi(ra); err == nil && time.Duration(s)*time.Second > wait {
			wait = min(time.Duration(s)*time.Second, 10*time.Second)
		}
	}
	// The one run's answer must be what a later retry gets.
	deadline := time.Now().Add(3*wait + 10*time.Second)
	var later response
	for {
		if len(conflicts) > 0 || len(ok) == 0 {
			select {
			case <-ctx.Done():
				return Result{checkConcur, Fail, ctx.Err().Error()}, false
			case <-time.After(wait):
			}
		}
		later, err = c.send(ctx, c.cfg.Method, q.path, &q.key, q.body, nil)
		if err != nil {
			return Result{checkConcur, Fail, err.Error()}, false
		}
		if later.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	switch {
	case !later.ok():
		return Result{checkConcur, Fail, fmt.Sprintf("after the burst, a retry with the key answered %s, not the one answer", later.summary())}, false
	case len(ok) > 0 && !later.same(ok[0]):
		c.remember(later)
		return Result{checkConcur, Fail, "after the burst, a retry with the key got another answer than the burst's: the request ran again"}, false
	}
	if ran, counted, err := c.ranSince(ctx, before); err != nil {
		return Result{checkConcur, Fail, err.Error()}, false
	} else if counted && ran != 1 {
		return Result{checkConcur, Fail, fmt.Sprintf("%d requests with one key at once: the counter moved by %d, not 1: the request ran more than once", n, ran)}, false
	}
	if len(conflicts) == 0 {
		return Result{checkConcur, Pass, fmt.Sprintf("%d equal answers, no 409", len(ok))}, false
	}
	how := fmt.Sprintf("%d at once with one key: %d got 409 while the first ran", n, len(conflicts))
	if ra := conflicts[0].header.Get("Retry-After"); ra != "" {
		how += " (Retry-After: " + ra + ")"
	}
	if len(ok) > 0 {
		how += fmt.Sprintf(", %d got the one answer", len(ok))
	}
	return Result{checkConcur, Pass, how + "; a later retry got the same answer"}, true
}

// warm opens the connections a burst uses, so that its requests leave at
// once: n GETs of the path, whose answers do not matter.
func (c *checker) warm(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = c.send(ctx, http.MethodGet, cmp.Or(c.cfg.CreatePath, c.cfg.Path), nil, "", nil)
		}()
	}
	wg.Wait()
}

func (c *checker) missing(ctx context.Context) Result {
	q, err := c.newRequest(ctx, nil)
	if err != nil {
		return Result{checkMissing, Fail, err.Error()}
	}
	r, err := c.send(ctx, c.cfg.Method, q.path, nil, q.body, nil)
	if err != nil {
		return Result{checkMissing, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if c.cfg.AllowMissingKey {
		if !r.ok() {
			return Result{checkMissing, Fail, fmt.Sprintf("no %s header answered %s; keys are configured as optional, so want 2xx", c.cfg.KeyHeader, r.summary())}
		}
		return Result{checkMissing, Pass, fmt.Sprintf("no %s header: %d, run unprotected as configured", c.cfg.KeyHeader, r.status)}
	}
	if r.status != http.StatusBadRequest {
		return Result{checkMissing, Fail, fmt.Sprintf("no %s header answered %s, not 400", c.cfg.KeyHeader, r.summary())}
	}
	if p := c.problemIssue(r, "idempotency_key_missing"); p != "" {
		return Result{checkMissing, Fail, "400, but " + p}
	}
	return Result{checkMissing, Pass, fmt.Sprintf("no %s header: 400%s", c.cfg.KeyHeader, c.problemNote())}
}

func (c *checker) malformed(ctx context.Context) Result {
	key := c.cfg.MalformedKey
	if key == "" {
		return Result{checkMalformed, Skip, "no malformed key configured (-malformed-key is empty)"}
	}
	q, err := c.newRequest(ctx, nil)
	if err != nil {
		return Result{checkMalformed, Fail, err.Error()}
	}
	r, err := c.send(ctx, c.cfg.Method, q.path, &key, q.body, nil)
	if err != nil {
		return Result{checkMalformed, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if r.status != http.StatusBadRequest {
		return Result{checkMalformed, Fail, fmt.Sprintf("%s: %s answered %s, not 400", c.cfg.KeyHeader, key, r.summary())}
	}
	if p := c.problemIssue(r, "idempotency_key_invalid"); p != "" {
		return Result{checkMalformed, Fail, "400, but " + p}
	}
	return Result{checkMalformed, Pass, fmt.Sprintf("%s: %s: 400%s", c.cfg.KeyHeader, key, c.problemNote())}
}

// created is a resource a check made, and whose credentials made it.
type created struct {
	location string
	as       http.Header
}

// cleanup deletes what the checks created, each once, with a key of its
// own (DELETE is protected too), as the user who created it.
func (c *checker) cleanup(ctx context.Context) Result {
	seen := map[string]bool{}
	var failed []string
	deleted := 0
	for _, cr := range c.createdAll() {
		if seen[cr.location] {
			continue
		}
		seen[cr.location] = true
		key := newKey()
		r, err := c.send(ctx, http.MethodDelete, cr.location, &key, "", cr.as)
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", cr.location, err))
		case r.ok() || r.status == http.StatusNotFound || r.status == http.StatusGone:
			deleted++
		default:
			failed = append(failed, fmt.Sprintf("DELETE %s: %s", cr.location, r.summary()))
		}
	}
	if len(failed) > 0 {
		return Result{checkCleanup, Fail, strings.Join(failed, "; ")}
	}
	if deleted == 0 {
		return Result{checkCleanup, Pass, "nothing to delete (no answer named a Location)"}
	}
	return Result{checkCleanup, Pass, fmt.Sprintf("deleted the %d resources the checks created", deleted)}
}

// send makes one request; a nil key sends no key header, and as replaces
// the headers it names.
func (c *checker) send(ctx context.Context, method, path string, key *string, body string, as http.Header) (response, error) {
	u := strings.TrimRight(c.cfg.BaseURL, "/") + path
	if strings.HasPrefix(path, "http://") || strings.HasPrefix(path, "https://") {
		u = path
	}
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return response{}, err
	}
	for name, values := range c.cfg.Header {
		for _, v := range values {
			req.Header.Add(name, v)
		}
	}
	for name, values := range as {
		req.Header[http.CanonicalHeaderKey(name)] = values
	}
	if body == "" {
		req.Header.Del("Content-Type")
	}
	if key != nil {
		req.Header.Set(c.cfg.KeyHeader, *key)
	}
	t0 := time.Now()
	resp, err := c.cfg.Client.Do(req)
	if err != nil {
		return response{}, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return response{}, fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b, elapsed: time.Since(t0)}, nil
}

// remember keeps the resource a successful answer created.
func (c *checker) remember(r response) { c.rememberAs(r, nil) }

func (c *checker) rememberAs(r response, as http.Header) {
	if loc := r.header.Get("Location"); loc != "" && c.cfg.Method != http.MethodDelete {
		c.keep(loc, as)
	}
}

// keep records a resource to delete at the end, with its creator's
// credentials.
func (c *checker) keep(loc string, as http.Header) {
	c.mu.Lock()
	c.created = append(c.created, loc)
	c.createdBy = append(c.createdBy, as)
	c.mu.Unlock()
}

func (c *checker) createdAll() []created {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]created, len(c.created))
	for i := range c.created {
		out[i] = created{c.created[i], c.createdBy[i]}
	}
	return out
}

// marked reports whether r carries the configured replay marker.
func (c *checker) marked(r response) bool {
	if c.cfg.ReplayHeader == "" {
		return false
	}
	v, ok := r.header[http.CanonicalHeaderKey(c.cfg.ReplayHeader)]
	if !ok {
		return false
	}
	return c.cfg.ReplayValue == "" || (len(v) > 0 && strings.EqualFold(strings.TrimSpace(v[0]), c.cfg.ReplayValue))
}

// firstRunMarker names the replay marker a first run carries, "" when it
// carries none: the configured one, or ichido's saying true whatever is
// configured.
func (c *checker) firstRunMarker(r response) string {
	if c.marked(r) {
		return c.markerText()
	}
	if v := r.header.Get(defaultMarker); strings.EqualFold(strings.TrimSpace(v), "true") || strings.EqualFold(strings.TrimSpace(v), "?1") {
		return defaultMarker + ": " + v
	}
	return ""
}

func (c *checker) markerText() string {
	if c.cfg.ReplayValue == "" {
		return c.cfg.ReplayHeader
	}
	return c.cfg.ReplayHeader + ": " + c.cfg.ReplayValue
}

// problemIssue says what is wrong with a refusal's format, "" when nothing
// is; code is ichido's code for it.
func (c *checker) problemIssue(r response, code string) string {
	if c.cfg.Problem == ProblemOff {
		return ""
	}
	mt, _, _ := mime.ParseMediaType(r.header.Get("Content-Type"))
	if mt != "application/problem+json" {
		return fmt.Sprintf("Content-Type is %q, not application/problem+json (-problem=off checks the status alone)", r.header.Get("Content-Type"))
	}
	var p map[string]any
	if err := json.Unmarshal(r.body, &p); err != nil {
		return "the problem is not a JSON object: " + r.summary()
	}
	if s, ok := p["status"]; ok && s != float64(r.status) {
		return fmt.Sprintf("the problem's status is %v, the response's %d", s, r.status)
	}
	if c.cfg.Problem == ProblemIchido {
		for _, f := range []string{"type", "title", "status", "detail"} {
			if _, ok := p[f]; !ok {
				return "the problem has no " + f
			}
		}
		if p["code"] != code {
			return fmt.Sprintf("the problem's code is %v, not %s", p["code"], code)
		}
	}
	return ""
}

func (c *checker) problemNote() string {
	if c.cfg.Problem == ProblemOff {
		return ""
	}
	return " application/problem+json"
}

// render is the body template with a fresh unique value.
func (c *checker) render() string { return c.renderTemplate(c.cfg.Body) }

func (c *checker) renderTemplate(s string) string {
	return strings.ReplaceAll(s, uniquePlaceholder, "idemcheck-"+randomHex(6))
}

// newKey is a random UUID version 4, the key format every implementation
// accepts (the IETF draft recommends one; Stripe takes any string).
func newKey() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
