// Command taskserver serves the sample task API as a plain net/http server,
// the shape of a Go service on ECS Fargate: the same task handlers and the
// same idempotency store as the Lambda functions, the mutating routes
// protected by idempotency.Middleware instead of idempotency.Wrap. It is
// what `make serve-http` runs.
//
//	taskserver [-addr 127.0.0.1:8080] [-migrate=true]
//
// It reads the environment of the Lambda functions (package taskfn: the
// idempotency store, IDEMPOTENCY_TTL, LOG_LEVEL) with DATABASE_URL
// required and DB_AUTH=url. Requests authenticate with a bearer token as
// `make token` prints it; like the local API it reads the token's claims
// without verifying a signature, which is why it listens on a loopback
// address only. A deployment puts a real verifier in its place.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "taskserver:", err)
		os.Exit(1)
	}
}

// DefaultAddr is where the server listens.
const DefaultAddr = "127.0.0.1:8080"

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("taskserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", DefaultAddr, "listen address; must be a loopback address (127.0.0.1, ::1, localhost)")
	doMigrate := fs.Bool("migrate", true, "apply the migrations before serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	ln, err := localapi.Listen(ctx, *addr)
	if err != nil {
		return err
	}
	return serve(ctx, ln, *doMigrate, getenv, stdout)
}

// serve serves the task API on ln until ctx is done.
func serve(ctx context.Context, ln net.Listener, doMigrate bool, getenv func(string) string, stdout io.Writer) error {
	defer ln.Close()
	dbURL := strings.TrimSpace(getenv("DATABASE_URL"))
	if dbURL == "" {
		return errors.New("DATABASE_URL is not set (make serve-http sets it to the private PostgreSQL's)")
	}
	if doMigrate {
		pool, err := pgxpool.New(ctx, dbURL)
		if err != nil {
			return err
		}
		_, err = migrate.Up(ctx, pool)
		pool.Close()
		if err != nil {
			return fmt.Errorf("migrations: %w", err)
		}
	}
	fns, err := taskfn.Build(ctx, func(name string) string {
		if name == "DB_AUTH" {
			return "url"
		}
		return getenv(name)
	})
	if err != nil {
		return err
	}
	defer fns.Close()
	h, err := fns.HTTPHandler(bearerSubject)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintf(stdout, "ready: the task API (net/http, idempotency.Middleware) listens on http://%s (make token SUB=<uuid> prints a token; Ctrl-C stops)\n", ln.Addr())
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return srv.Shutdown(shutdownCtx)
}

// bearerSubject reads the sub claim of the request's bearer token, checking
// exp and nbf but no signature (see the package comment).
func bearerSubject(r *http.Request) (string, error) {
	id, err := localapi.Authorize(r.Header.Get("Authorization"), time.Now())
	if err != nil {
		return "", err
	}
	return id.Claims["sub"], nil
}
