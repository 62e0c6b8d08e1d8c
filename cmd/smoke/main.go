// Command smoke is what `make smoke` runs: the first check after
// `sam deploy`, or of a local run. It prints one verdict per check (PASS,
// FAIL or SKIP with one line of why) and exits 1 when one fails.
//
//	smoke [-stack NAME [-region R]] [-url URL] [-token TOKEN] [-database-url URL] [-bin DIR]
//
// With -stack it checks the deployed stack: it reads the stack's outputs
// (aws cloudformation describe-stacks), makes a Cognito test user (or uses
// -token), runs idemcheck's HTTP checks against ApiUrl, sends one task event
// twice to the task events queue and reads TaskActivityFunction's log for
// the one run, reads the purge's last run when -database-url reaches the
// database, and deletes the test user.
//
// Without -stack it checks the local API (make run) at -url, starting it
// when nothing answers there: the same HTTP checks with a token of its own,
// the same event fed twice through the local queue (cmd/localqueue) and
// counted in the database, and the purge's last run from the database's
// cron.job_run_details. The parts that need AWS are reported as SKIP.
//
// It runs the binaries idemcheck, localapi and localqueue from -bin (by
// default its own folder), which `make smoke` builds. docs/smoke.md tells
// what each check proves and what it cannot.
package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "smoke:", err)
	}
	os.Exit(code)
}

// options are the command's flags.
type options struct {
	stack, region string
	url, token    string
	databaseURL   string
	bin           string
	startLocal    bool
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("smoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o options
	fs.StringVar(&o.stack, "stack", "", "the deployed stack to check (sam deploy's stack name); empty checks the local API")
	fs.StringVar(&o.region, "region", getenv("AWS_REGION"), "the stack's region (default: AWS_REGION, else the AWS CLI's)")
	fs.StringVar(&o.url, "url", "", "the API's base URL (default: the stack's ApiUrl, or http://127.0.0.1:3000 locally)")
	fs.StringVar(&o.token, "token", getenv("SMOKE_TOKEN"), "an access token to use instead of a test user of its own (default: SMOKE_TOKEN)")
	fs.StringVar(&o.databaseURL, "database-url", getenv("SMOKE_DATABASE_URL"), "the database to read the purge's runs from (default: SMOKE_DATABASE_URL; locally also DATABASE_URL or the private PostgreSQL)")
	fs.StringVar(&o.bin, "bin", "", "the folder of the idemcheck, localapi and localqueue binaries (default: this command's folder)")
	fs.BoolVar(&o.startLocal, "start", true, "locally, start the local API when nothing answers at -url")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0, nil
		}
		return 2, err
	}
	if fs.NArg() > 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.bin == "" {
		exe, err := os.Executable()
		if err != nil {
			return 2, err
		}
		o.bin = filepath.Dir(exe)
	}
	r := &report{w: stdout}
	if o.stack == "" {
		runLocal(ctx, o, getenv, r)
	} else {
		runStack(ctx, o, r)
	}
	return r.finish(), nil
}

// report prints the verdicts as they come and counts them.
type report struct {
	w                io.Writer
	pass, fail, skip int
	sectionPrinted   bool
}

func (r *report) section(title string) {
	if r.sectionPrinted {
		fmt.Fprintln(r.w)
	}
	r.sectionPrinted = true
	fmt.Fprintf(r.w, "== %s\n", title)
}

func (r *report) note(format string, args ...any) {
	fmt.Fprintf(r.w, "      %s\n", fmt.Sprintf(format, args...))
}

func (r *report) add(verdict, name, why string) {
	switch verdict {
	case "PASS":
		r.pass++
	case "FAIL":
		r.fail++
	case "SKIP":
		r.skip++
	}
	fmt.Fprintf(r.w, "%-4s  %-14s %s\n", verdict, name, why)
}

func (r *report) passf(name, format string, args ...any) {
	r.add("PASS", name, fmt.Sprintf(format, args...))
}
func (r *report) failf(name, format string, args ...any) {
	r.add("FAIL", name, fmt.Sprintf(format, args...))
}
func (r *report) skipf(name, format string, args ...any) {
	r.add("SKIP", name, fmt.Sprintf(format, args...))
}

// verdictLine counts a line of idemcheck's output that is a verdict.
func (r *report) verdictLine(line string) {
	f := strings.Fields(line)
	if len(f) >= 2 {
		switch f[0] {
		case "PASS":
			r.pass++
		case "FAIL":
			r.fail++
		case "SKIP":
			r.skip++
		}
	}
}

func (r *report) finish() int {
	fmt.Fprintf(r.w, "\nsmoke: %d passed, %d failed, %d skipped\n", r.pass, r.fail, r.skip)
	if r.fail > 0 {
		return 1
	}
	return 0
}

// jwtClaims reads a token's claims without verifying it: the API verifies
// tokens; this only needs to know whose they are.
func jwtClaims(token string) (map[string]any, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("the token is not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, fmt.Errorf("the token's claims: %w", err)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		return nil, fmt.Errorf("the token's claims: %w", err)
	}
	return claims, nil
}

// taskEvent is one task event for the task events queue, with an id of
// its own, for the user sub.
func taskEvent(sub string) (id, body string) {
	id = "smoke-" + randomHex(8)
	b, _ := json.Marshal(map[string]string{
		"event_id":    id,
		"user_id":     sub,
		"task_id":     newUUID(),
		"kind":        "created",
		"occurred_at": time.Now().UTC().Format(time.RFC3339),
	})
	return id, string(b)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
