// Command soak runs the long reliability cases of package test/reliability
// and writes their report: the tests with -soak (many more rounds of the
// concurrency, kill, crash and outage cases, and a minute of steady load),
// then a bounded fuzzing run of the request → response path. It starts a
// private PostgreSQL cluster of its own for them and removes it at the end.
//
//	go run ./cmd/soak -out docs/reliability.md
//
// make soak runs it. It exits non-zero when any case failed; the report is
// written either way and says which.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// row is one row of the report; the tests write the same fields.
type row struct {
	Case   string `json:"case"`
	Tried  string `json:"tried"`
	Times  int    `json:"times"`
	Seen   string `json:"seen"`
	Lost   string `json:"lost"`
	Test   string `json:"test"`
	Passed bool   `json:"passed"`
}

const pkg = "./test/reliability"

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "docs/reliability.md", "the report to write")
	fuzzTime := flag.Duration("fuzztime", 60*time.Second, "how long to fuzz")
	flag.Parse()
	ctx := context.Background()
	started := time.Now()

	work, err := os.MkdirTemp("", "ichido-soak-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	cluster, err := pgtest.StartCluster(ctx, pgtest.Options{Dir: filepath.Join(work, "pg")})
	if err != nil {
		return err
	}
	defer func() { _ = cluster.Destroy() }()
	if err := createCron(ctx, cluster.URL("")); err != nil {
		return err
	}
	env := append(os.Environ(), "TEST_DATABASE_URL="+cluster.URL(""))

	// The tests, long cases on.
	reportPath := filepath.Join(work, "tests.json")
	testArgs := []string{"test", "-count=1", "-timeout", "15m", "-run", ".", pkg, "-args", "-soak"}
	var testOut bytes.Buffer
	testErr := goCmd(ctx, append(env, "ICHIDO_SOAK_REPORT="+reportPath), testArgs, &testOut)
	var rows []row
	if b, err := os.ReadFile(reportPath); err == nil {
		if err := json.Unmarshal(b, &rows); err != nil {
			return fmt.Errorf("reading the tests' results: %w", err)
		}
	}
	rows = append(rows, failedWithoutRow(testOut.String(), rows)...)

	// Fuzzing, bounded in time.
	fuzzArgs := []string{"test", "-count=1", "-run", "^$", "-fuzz", "^FuzzRequest$",
		"-fuzztime", fuzzTime.String(), "-fuzzminimizetime", "5s", pkg}
	var fuzzOut bytes.Buffer
	fuzzErr := goCmd(ctx, env, fuzzArgs, &fuzzOut)
	rows = append(rows, fuzzRow(fuzzOut.String(), *fuzzTime, fuzzErr))

	report := render(rows, started, testArgs, fuzzArgs, testErr) + keptSections(*out)
	if err := os.WriteFile(*out, []byte(report), 0o644); err != nil {
		return err
	}
	fmt.Printf("soak: wrote %s (%d rows) in %v\n", *out, len(rows), time.Since(started).Round(time.Second))
	return errors.Join(wrap("tests", testErr), wrap("fuzzing", fuzzErr))
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s: %w", what, err)
}

func createCron(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE EXTENSION IF NOT EXISTS pg_cron")
	return err
}

// goCmd runs the go command, its output on standard output (and in also).
func goCmd(ctx context.Context, env, args []string, also io.Writer) error {
	fmt.Println("soak: go", strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goBinary(), args...)
	cmd.Env = env
	w := io.Writer(os.Stdout)
	if also != nil {
		w = io.MultiWriter(os.Stdout, also)
	}
	cmd.Stdout, cmd.Stderr = w, w
	return cmd.Run()
}

func goBinary() string {
	if g := os.Getenv("GO"); g != "" {
		return g
	}
	return "go" // looked up on PATH
}

var failRe = regexp.MustCompile(`(?m)^\s*--- FAIL: (\S+)`)

// failedWithoutRow returns a row for each failed test that failed before
// writing its own.
func failedWithoutRow(output string, rows []row) []row {
	have := map[string]bool{}
	for _, r := range rows {
		have[r.Test] = true
	}
	var out []row
	for _, m := range failRe.FindAllStringSubmatch(output, -1) {
		name := m[1]
		if have[name] || strings.Contains(name, "/") && have[strings.Split(name, "/")[0]] {
			continue
		}
		have[name] = true
		out = append(out, row{Case: name, Tried: "see the test", Seen: "the test failed before it could report; see the run's output", Lost: "unknown", Test: name})
	}
	return out
}

var (
	execsRe       = regexp.MustCompile(`execs: (\d+) `)
	interestingRe = regexp.MustCompile(`new interesting: (\d+) \(total: (\d+)\)`)
)

// fuzzRow summarises the fuzzing run from its output.
func fuzzRow(output string, d time.Duration, err error) row {
	var execs, interesting, corpus string
	for _, m := range execsRe.FindAllStringSubmatch(output, -1) {
		execs = m[1]
	}
	for _, m := range interestingRe.FindAllStringSubmatch(output, -1) {
		interesting, corpus = m[1], m[2]
	}
	n := 0
	_, _ = fmt.Sscan(execs, &n)
	r := row{
		Case:   "fuzzing the request → response path",
		Tried:  fmt.Sprintf("go test -fuzz FuzzRequest for %v: fuzzed method, path, key, body, subject and content type through the local API Gateway to the wrapped task handlers; invariants: no 5xx for a client's error, every error problem+json (or the gateway's own 401/404/413), a stored answer replays byte for byte, the same key with another body gets 422 and changes nothing", d),
		Times:  n,
		Seen:   fmt.Sprintf("%s executions, %s new interesting inputs (corpus %s), no failing input", execs, interesting, corpus),
		Lost:   "nothing",
		Test:   "FuzzRequest",
		Passed: err == nil,
	}
	if err != nil {
		r.Seen = fmt.Sprintf("%s executions; a failing input was found (see the run's output and testdata/fuzz)", execs)
		r.Lost = "a failing input"
	}
	return r
}

func render(rows []row, started time.Time, testArgs, fuzzArgs []string, testErr error) string {
	var b strings.Builder
	cell := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "|", `\|`), "\n", " ") }
	fmt.Fprintf(&b, "# Reliability\n\n")
	fmt.Fprintf(&b, "Written by `make soak` (cmd/soak) on %s in %v: %s, %s/%s, %d CPUs, vanilla PostgreSQL 15 on loopback. Run `make soak` again rather than editing it.\n\n",
		started.UTC().Format("2006-01-02 15:04 UTC"), time.Since(started).Round(time.Second), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU())
	b.WriteString("Each row is a property of the idempotency contract (`docs/` and the package documentation of `pkg/idempotency`) put under a condition that breaks idempotency layers in practice. " +
		"Worker processes are separate OS processes, each with its own database pool of 2 connections, serving the task API through the local API Gateway emulator (`internal/localapi`) on a loopback port, as separate Lambda execution environments would. " +
		"Handler runs are counted by a spy inside the decorator, tasks by counting rows, and a duplicate is two rows of `tasks` for one (user, key). " +
		"\"Lost\" must be nothing.\n\n")
	b.WriteString("| case | what was tried | times | what was seen | lost | result |\n|---|---|---|---|---|---|\n")
	failed := 0
	for _, r := range rows {
		result := "pass"
		if !r.Passed {
			result, failed = "**FAIL**", failed+1
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s | %s | %s |\n", cell(r.Case), cell(r.Tried), r.Times, cell(r.Seen), cell(r.Lost), result)
	}
	if testErr != nil && failed == 0 {
		b.WriteString("\n**The test run failed** without a failing row: see its output.\n")
	}
	b.WriteString("\n## How it was run\n\n")
	fmt.Fprintf(&b, "- `go %s` (with `ICHIDO_SOAK_REPORT` set to collect the rows)\n", strings.Join(testArgs, " "))
	fmt.Fprintf(&b, "- `go %s`\n", strings.Join(fuzzArgs, " "))
	b.WriteString("\nThe fast versions of the same cases (fewer rounds, no load, the fuzz seed corpus) run in `make test`; the tests are in `test/reliability`.\n")
	b.WriteString("\n## Decisions these runs rest on\n\n" +
		"- ADR 0070: how the reliability cases are run (worker processes, spy, private clusters) and what they do not cover.\n" +
		"- ADR 0071: answers to oversized bodies and to bytes that are not UTF-8 under a JSON content type.\n" +
		"- ADR 0072: after the key table is lost, the same key with another body is answered 422, and that answer is not stored, so the original request's retry still gets its task.\n")
	return b.String()
}

// keptMarker starts the part of the report that make soak does not write
// (the model checking's and the history checks' figures, written with
// make verify and make soak-history): it is kept as it is.
const keptMarker = "<!-- Kept by make soak: the sections below are not written by cmd/soak. -->"

// keptSections returns the kept part of the report at path, from its
// marker on, or "" when there is none.
func keptSections(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	i := bytes.Index(b, []byte(keptMarker))
	if i < 0 {
		return ""
	}
	return "\n" + string(b[i:])
}
