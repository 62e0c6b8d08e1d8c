package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// DefaultLocalURL is where `make run` serves the task API.
const DefaultLocalURL = "http://127.0.0.1:3000"

// runLocal checks the local API: the HTTP contract, the task events queue
// as cmd/localqueue plays it, and the purge's last run.
func runLocal(ctx context.Context, o options, getenv func(string) string, r *report) {
	base := o.url
	if base == "" {
		base = DefaultLocalURL
	}
	r.section("local: the task API at " + base + " (no -stack: the parts that need AWS are skipped)")
	r.skipf("stack", "no stack given: make smoke STACK=<name> checks a deployed one (its outputs, a Cognito test user, the SQS queue)")

	dbURL, dbFrom := o.databaseURL, "-database-url"
	if dbURL == "" && getenv("DATABASE_URL") != "" {
		dbURL, dbFrom = getenv("DATABASE_URL"), "DATABASE_URL"
	}
	if answers(ctx, base) {
		r.note("using the local API already running at %s", base)
	} else if !o.startLocal {
		r.failf("local-api", "nothing answers at %s: run make run in another terminal, or let smoke start it (-start)", base)
		return
	} else {
		api, err := startLocalAPI(ctx, o.bin, base, getenv)
		if err != nil {
			r.failf("local-api", "%v", err)
			return
		}
		defer func() {
			r.section("cleanup")
			if err := api.stop(); err != nil {
				r.note("stopping the local API: %v", err)
			} else {
				r.note("stopped the local API it started")
			}
		}()
		r.note("started the local API at %s (it stops at the end)", base)
		if dbURL == "" {
			dbURL, dbFrom = api.dbURL, "the local API it started"
		}
	}
	if dbURL == "" {
		// make run without DATABASE_URL serves from the private PostgreSQL.
		u, err := pgtest.SharedURL(ctx)
		if err != nil {
			r.note("no database to read: %v", err)
		}
		dbURL, dbFrom = u, "the private PostgreSQL (make run's default)"
	}

	token, sub := o.token, ""
	if token == "" {
		sub = newUUID()
		t, err := localapi.NewToken(localapi.TokenOptions{Subject: sub, TTL: time.Hour})
		if err != nil {
			r.failf("token", "%v", err)
			return
		}
		token = t
		r.skipf("test-user", "local: no Cognito; a token from cmd/token for the new user %s (nothing to delete afterwards)", sub)
	} else {
		claims, err := jwtClaims(token)
		if err != nil {
			r.failf("token", "%v", err)
			return
		}
		sub, _ = claims["sub"].(string)
		r.skipf("test-user", "a token was given (-token/SMOKE_TOKEN), for sub %s", sub)
	}

	httpChecks(ctx, o.bin, base, token, r)

	r.section("SQS: one task event sent twice has one effect (cmd/localqueue, the function's handler in process)")
	if dbURL == "" {
		r.skipf("sqs-once", "no database to feed the queue's handler and count the entries in")
	} else {
		r.note("database: %s (%s)", redact(dbURL), dbFrom)
		localQueueCheck(ctx, o.bin, dbURL, sub, r)
	}

	r.section("pg_cron: the key store's purge (cron.job, cron.job_run_details)")
	if dbURL == "" {
		r.skipf("purge-job", "no database to read")
		r.skipf("purge-last-run", "no database to read")
	} else {
		// A local cluster is stopped and started at will: a stale run is
		// not a fault here.
		purgeChecks(ctx, dbURL, 0, r)
	}
}

// answers reports whether an HTTP server answers at base.
func answers(ctx context.Context, base string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/tasks", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// runningAPI is a local API this command started.
type runningAPI struct {
	cmd   *exec.Cmd
	dbURL string
	done  chan error
	log   *syncBuffer
}

// startLocalAPI runs the localapi binary on base's address, as make run
// does, and waits for its ready line.
func startLocalAPI(ctx context.Context, bin, base string, getenv func(string) string) (*runningAPI, error) {
	u, err := url.Parse(base)
	if err != nil || u.Scheme != "http" || u.Port() == "" {
		return nil, fmt.Errorf("cannot start the local API at %q: give -url http://127.0.0.1:<port>", base)
	}
	addr := net.JoinHostPort(u.Hostname(), u.Port())
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return nil, fmt.Errorf("the local API runs from the repository: %w", err)
	}
	cmd := exec.Command(filepath.Join(bin, "localapi"), "-addr", addr, "-template", filepath.Join(root, "template.yaml"))
	cmd.Dir = root
	cmd.Env = os.Environ()
	if getenv("LOG_LEVEL") == "" {
		cmd.Env = append(cmd.Env, "LOG_LEVEL=error")
	}
	api := &runningAPI{cmd: cmd, done: make(chan error, 1), log: &syncBuffer{}}
	cmd.Stderr = api.log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("cannot run %s: %w (make smoke builds it)", cmd.Path, err)
	}
	ready := make(chan struct{})
	var dbURL string
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "DATABASE_URL="):
				dbURL = strings.TrimPrefix(line, "DATABASE_URL=")
			case strings.HasPrefix(line, "ready: "):
				close(ready)
			}
		}
		api.done <- cmd.Wait()
	}()
	select {
	case <-ready:
		api.dbURL = dbURL
		return api, nil
	case err := <-api.done:
		return nil, fmt.Errorf("the local API stopped before it was ready (%v): %s", err, lastLines(api.log.String(), 5))
	case <-time.After(3 * time.Minute):
		_ = cmd.Process.Kill()
		return nil, fmt.Errorf("the local API printed no ready line in 3 minutes: %s", lastLines(api.log.String(), 5))
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		return nil, ctx.Err()
	}
}

// stop ends the local API as Ctrl-C would, so that it stops the private
// PostgreSQL if it started it.
func (a *runningAPI) stop() error {
	_ = a.cmd.Process.Signal(syscall.SIGINT)
	select {
	case err := <-a.done:
		return err
	case <-time.After(30 * time.Second):
		_ = a.cmd.Process.Kill()
		return fmt.Errorf("it did not stop within 30s and was killed")
	}
}

// localQueueCheck feeds one task event twice to the activity function's
// handler through cmd/localqueue (as the task events queue delivers a
// resent event: two messages, one event_id) and counts its entries.
func localQueueCheck(ctx context.Context, bin, dbURL, sub string, r *report) {
	if !uuidRE.MatchString(sub) {
		sub = newUUID() // the event's user_id must be a UUID
	}
	id, body := taskEvent(sub)
	dead, err := os.CreateTemp("", "smoke-dead-letter-*.jsonl")
	if err != nil {
		r.failf("sqs-once", "%v", err)
		return
	}
	dead.Close()
	defer os.Remove(dead.Name())
	cmd := exec.CommandContext(ctx, filepath.Join(bin, "localqueue"), "-database-url", dbURL, "-dead-letter", dead.Name())
	cmd.Env = append(os.Environ(), "LOG_LEVEL=error")
	cmd.Stdin = strings.NewReader(body + "\n" + body + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.failf("sqs-once", "localqueue: %v: %s", err, lastLines(string(out), 3))
		return
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		r.failf("sqs-once", "connecting to the database: %v", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM task_activity WHERE user_id = $1::uuid AND event_id = $2`, sub, id).Scan(&n); err != nil {
		r.failf("sqs-once", "counting the activity entries: %v", err)
		return
	}
	summary := lastLines(string(out), 1)
	if i := strings.Index(summary, " to "); i > 0 {
		summary = summary[:i] + " dead-lettered" // not the temporary file's name
	}
	if n != 1 {
		r.failf("sqs-once", "event %s sent twice left %d activity entries, not 1 (%s)", id, n, summary)
	} else {
		r.passf("sqs-once", "event %s sent twice: 1 activity entry (%s)", id, summary)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM task_activity WHERE user_id = $1::uuid AND event_id = $2`, sub, id); err != nil {
		r.note("could not delete the activity entry of %s: %v", id, err)
	} else {
		r.note("deleted the activity entry of %s (its idempotency record expires with the others)", id)
	}
}

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// redact hides a password in a database URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(a database URL)"
	}
	return u.Redacted()
}

// lastLines is the end of a command's output, joined on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// syncBuffer is a bytes.Buffer that a process's output and a reader may
// share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
