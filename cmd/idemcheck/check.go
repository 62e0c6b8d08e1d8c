package main

import (
	"bytes"
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
// run.
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
	checkReplay    = "replay"
	checkMismatch  = "mismatch"
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

// Config says which request to make and what the API is expected to answer.
type Config struct {
	// BaseURL is the API's base URL, such as https://abc.execute-api.eu-west-1.amazonaws.com.
	BaseURL string
	// Method is the protected method. Defaults to POST.
	Method string
	// Path is the resource's path, such as /tasks.
	Path string
	// Body is the request body; each {{unique}} in it is replaced by a value
	// of its own per logical request. Empty sends no body.
	Body string
	// MismatchBody is the body sent with a used key to provoke a 422.
	// Defaults to Body rendered with another {{unique}} value; with neither,
	// the mismatch check is skipped.
	MismatchBody string
	// Header is sent with every request (Authorization, Content-Type, …).
	Header http.Header
	// KeyHeader names the key's header. Defaults to Idempotency-Key.
	KeyHeader string
	// ReplayHeader names the header that marks a replayed response; empty
	// checks no marker. ReplayValue is the value it must have; empty
	// accepts any value.
	ReplayHeader, ReplayValue string
	// Problem is the format of the refusals: ProblemOff, ProblemRFC9457 or
	// ProblemIchido. Defaults to ProblemRFC9457.
	Problem string
	// AllowMissingKey expects a request without a key to run unprotected
	// (2xx) instead of being refused with 400.
	AllowMissingKey bool
	// MalformedKey is the key the malformed-key check sends; empty skips
	// that check.
	MalformedKey string
	// Concurrent is how many requests with one key the concurrent check
	// starts at once. Defaults to 2.
	Concurrent int
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
	cfg     Config
	mu      sync.Mutex
	created []string // Location headers of successful runs
}

// response is one answer.
type response struct {
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

func (r response) ok() bool { return r.status >= 200 && r.status < 300 }

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
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{Timeout: cfg.Timeout}
	}
	c := &checker{cfg: cfg}
	var out []Result
	first, firstOK := c.first(ctx, &out)
	if firstOK {
		out = append(out, c.replay(ctx, first), c.mismatch(ctx, first), c.concurrent(ctx))
	} else {
		why := "the first request did not succeed, so there is nothing to replay"
		out = append(out, Result{checkReplay, Skip, why}, Result{checkMismatch, Skip, why}, Result{checkConcur, Skip, why})
	}
	out = append(out, c.missing(ctx), c.malformed(ctx))
	if cfg.DeleteCreated {
		out = append(out, c.cleanup(ctx))
	}
	return out
}

// sent is a first request: its key, its body and its answer.
type sent struct {
	key, body string
	resp      response
}

func (c *checker) first(ctx context.Context, out *[]Result) (sent, bool) {
	s := sent{key: newKey(), body: c.render()}
	r, err := c.send(ctx, c.cfg.Method, c.cfg.Path, &s.key, s.body)
	if err != nil {
		*out = append(*out, Result{checkFirst, Fail, err.Error()})
		return s, false
	}
	s.resp = r
	if !r.ok() {
		*out = append(*out, Result{checkFirst, Fail, fmt.Sprintf("%s %s with a new key answered %s, not 2xx", c.cfg.Method, c.cfg.Path, r.summary())})
		return s, false
	}
	c.remember(r)
	if c.marked(r) {
		*out = append(*out, Result{checkFirst, Fail, fmt.Sprintf("answered %d but marked %s: %s on a first run", r.status, c.cfg.ReplayHeader, r.header.Get(c.cfg.ReplayHeader))})
		return s, true
	}
	*out = append(*out, Result{checkFirst, Pass, fmt.Sprintf("%s %s with a new key: %d in %s", c.cfg.Method, c.cfg.Path, r.status, r.elapsed.Round(time.Millisecond))})
	return s, true
}

func (c *checker) replay(ctx context.Context, first sent) Result {
	r, err := c.send(ctx, c.cfg.Method, c.cfg.Path, &first.key, first.body)
	if err != nil {
		return Result{checkReplay, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	var wrong []string
	if r.status != first.resp.status {
		wrong = append(wrong, fmt.Sprintf("status %d, first %d", r.status, first.resp.status))
	}
	if !bytes.Equal(r.body, first.resp.body) {
		wrong = append(wrong, "another body (the request ran again?): "+r.summary())
	}
	for _, h := range []string{"Content-Type", "Location"} {
		if got, want := r.header.Get(h), first.resp.header.Get(h); got != want {
			wrong = append(wrong, fmt.Sprintf("%s %q, first %q", h, got, want))
		}
	}
	if c.cfg.ReplayHeader != "" && !c.marked(r) {
		wrong = append(wrong, fmt.Sprintf("no %s", c.markerText()))
	}
	if len(wrong) > 0 {
		return Result{checkReplay, Fail, "the retry with the same key: " + strings.Join(wrong, "; ")}
	}
	if c.cfg.ReplayHeader == "" {
		return Result{checkReplay, Pass, fmt.Sprintf("%d, the same body byte for byte (no replay marker checked)", r.status)}
	}
	return Result{checkReplay, Pass, fmt.Sprintf("%d, the same body byte for byte, %s", r.status, c.markerText())}
}

func (c *checker) mismatch(ctx context.Context, first sent) Result {
	body := c.cfg.MismatchBody
	if body == "" {
		if !strings.Contains(c.cfg.Body, uniquePlaceholder) {
			return Result{checkMismatch, Skip, "no other body to send: give -mismatch-body, or put " + uniquePlaceholder + " in -body"}
		}
		body = c.render()
	}
	if body == first.body {
		return Result{checkMismatch, Skip, "the mismatch body is the first request's body"}
	}
	r, err := c.send(ctx, c.cfg.Method, c.cfg.Path, &first.key, body)
	if err != nil {
		return Result{checkMismatch, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if r.status != http.StatusUnprocessableEntity {
		return Result{checkMismatch, Fail, fmt.Sprintf("the same key with another body answered %s, not 422", r.summary())}
	}
	if p := c.problemIssue(r, "idempotency_key_reused"); p != "" {
		return Result{checkMismatch, Fail, "422, but " + p}
	}
	return Result{checkMismatch, Pass, "the same key with another body: 422" + c.problemNote()}
}

// concurrent starts Concurrent requests with one key at once. Seen from
// the client, one execution means: every 2xx answer is the same answer,
// the others are 409 (with Retry-After when asked), and a later retry gets
// that same answer.
func (c *checker) concurrent(ctx context.Context) Result {
	key, body := newKey(), c.render()
	n := c.cfg.Concurrent
	answers := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			answers[i], errs[i] = c.send(ctx, c.cfg.Method, c.cfg.Path, &key, body)
		}()
	}
	close(start)
	wg.Wait()
	var ok, conflicts []response
	for i, r := range answers {
		if errs[i] != nil {
			return Result{checkConcur, Fail, errs[i].Error()}
		}
		switch {
		case r.ok():
			ok = append(ok, r)
		case r.status == http.StatusConflict:
			conflicts = append(conflicts, r)
		default:
			return Result{checkConcur, Fail, fmt.Sprintf("%d requests with one key at once: one answered %s (want 2xx, or 409 while the first runs)", n, r.summary())}
		}
	}
	distinct := map[string]bool{}
	for _, r := range ok {
		distinct[string(r.body)] = true
	}
	if len(ok) > 0 {
		c.remember(ok[0])
	}
	if len(distinct) > 1 {
		for _, r := range ok[1:] {
			c.remember(r)
		}
		return Result{checkConcur, Fail, fmt.Sprintf("%d requests with one key at once gave %d different 2xx answers: the request ran more than once", n, len(distinct))}
	}
	wait := time.Second
	for _, r := range conflicts {
		ra := r.header.Get("Retry-After")
		if c.cfg.RetryAfter && ra == "" {
			return Result{checkConcur, Fail, "a 409 without Retry-After"}
		}
		if p := c.problemIssue(r, "idempotency_key_in_use"); p != "" {
			return Result{checkConcur, Fail, "409, but " + p}
		}
		if s, err := strconv.Atoi(ra); err == nil && time.Duration(s)*time.Second > wait {
			wait = min(time.Duration(s)*time.Second, 10*time.Second)
		}
	}
	// The one execution's answer must be what a later retry gets.
	deadline := time.Now().Add(3*wait + 10*time.Second)
	var later response
	for {
		if len(conflicts) > 0 || len(ok) == 0 {
			select {
			case <-ctx.Done():
				return Result{checkConcur, Fail, ctx.Err().Error()}
			case <-time.After(wait):
			}
		}
		var err error
		later, err = c.send(ctx, c.cfg.Method, c.cfg.Path, &key, body)
		if err != nil {
			return Result{checkConcur, Fail, err.Error()}
		}
		if later.status != http.StatusConflict || time.Now().After(deadline) {
			break
		}
	}
	switch {
	case !later.ok():
		return Result{checkConcur, Fail, fmt.Sprintf("after the burst, a retry with the key answered %s, not the one answer", later.summary())}
	case len(ok) == 0:
		c.remember(later)
	case !bytes.Equal(later.body, ok[0].body):
		c.remember(later)
		return Result{checkConcur, Fail, "after the burst, a retry with the key got another answer than the burst's: the request ran again"}
	}
	how := fmt.Sprintf("%d ran", len(ok))
	if len(ok) > 1 {
		how = fmt.Sprintf("%d equal %d answers (a duplicate waited or replayed", len(ok), ok[0].status)
		if marked := c.countMarked(ok); marked > 0 {
			how += fmt.Sprintf("; %d marked %s", marked, c.cfg.ReplayHeader)
		}
		how += ")"
	}
	if len(conflicts) > 0 {
		how += fmt.Sprintf(", %d got 409", len(conflicts))
		if ra := conflicts[0].header.Get("Retry-After"); ra != "" {
			how += " Retry-After: " + ra
		}
	}
	return Result{checkConcur, Pass, fmt.Sprintf("%d at once with one key: %s; a later retry got the same answer", n, how)}
}

func (c *checker) missing(ctx context.Context) Result {
	r, err := c.send(ctx, c.cfg.Method, c.cfg.Path, nil, c.render())
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
	r, err := c.send(ctx, c.cfg.Method, c.cfg.Path, &key, c.render())
	if err != nil {
		return Result{checkMalformed, Fail, err.Error()}
	}
	if r.ok() {
		c.remember(r)
	}
	if r.status != http.StatusBadRequest {
		return Result{checkMalformed, Fail, fmt.Sprintf("%s: %q answered %s, not 400", c.cfg.KeyHeader, key, r.summary())}
	}
	if p := c.problemIssue(r, "idempotency_key_invalid"); p != "" {
		return Result{checkMalformed, Fail, "400, but " + p}
	}
	return Result{checkMalformed, Pass, fmt.Sprintf("%s: %q: 400%s", c.cfg.KeyHeader, key, c.problemNote())}
}

// cleanup deletes what the checks created, each once, with a key of its
// own (DELETE is protected too).
func (c *checker) cleanup(ctx context.Context) Result {
	seen := map[string]bool{}
	var failed []string
	deleted := 0
	for _, loc := range c.created {
		if seen[loc] {
			continue
		}
		seen[loc] = true
		key := newKey()
		r, err := c.send(ctx, http.MethodDelete, loc, &key, "")
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("%s: %v", loc, err))
		case r.ok() || r.status == http.StatusNotFound || r.status == http.StatusGone:
			deleted++
		default:
			failed = append(failed, fmt.Sprintf("DELETE %s: %s", loc, r.summary()))
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

// send makes one request; a nil key sends no key header.
func (c *checker) send(ctx context.Context, method, path string, key *string, body string) (response, error) {
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
func (c *checker) remember(r response) {
	if loc := r.header.Get("Location"); loc != "" {
		c.mu.Lock()
		c.created = append(c.created, loc)
		c.mu.Unlock()
	}
}

func (c *checker) countMarked(rs []response) int {
	n := 0
	for _, r := range rs {
		if c.marked(r) {
			n++
		}
	}
	return n
}

// marked reports whether r carries the replay marker.
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
func (c *checker) render() string {
	return strings.ReplaceAll(c.cfg.Body, uniquePlaceholder, "idemcheck-"+randomHex(6))
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
