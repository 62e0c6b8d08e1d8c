// Command drainserver is a small HTTP server protected by ichido on
// PostgreSQL, which stops as a server should on SIGTERM: http.Server's
// Shutdown and idempotency.Drain's, within one grace period. The shutdown
// test runs two of them.
//
// It reads the database from the dbpool variables (DB_AUTH=url and
// DATABASE_URL), the grace period from GRACE (a Go duration), and, with
// BLOCK=1, its handler runs until its context is cancelled, as a long run
// cut off by the shutdown. Every line it writes is JSON on standard
// output: "listening" with the address first, "work started" when a run
// starts, "stopped" last.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "drainserver:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger := slog.New(slog.NewJSONHandler(os.Stdout, nil))
	grace, err := time.ParseDuration(os.Getenv("GRACE"))
	if err != nil {
		return fmt.Errorf("GRACE: %w", err)
	}
	cfg, err := dbpool.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	pool, err := dbpool.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()

	store, err := pgstore.New(pool, nil)
	if err != nil {
		return err
	}
	drain := &idempotency.Drain{}
	protect, err := idempotency.Middleware(idempotency.Config{
		Store: store,
		// A test's stand-in for an authentication middleware.
		Subject: func(_ context.Context, r idempotency.Request) (string, error) {
			if v := r.Header("X-User"); len(v) == 1 {
				return v[0], nil
			}
			return "", nil
		},
		Settings: idempotency.Settings{Drain: drain, Logger: logger},
	})
	if err != nil {
		return err
	}
	block := os.Getenv("BLOCK") == "1"
	work := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if block {
			logger.Info("work started")
			<-r.Context().Done()
			http.Error(w, "cut off by the shutdown", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"pid":` + fmt.Sprint(os.Getpid()) + `}`))
	})

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: protect(work), ReadHeaderTimeout: 10 * time.Second}
	logger.Info("listening", "addr", lis.Addr().String())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}

	// SIGTERM: stop accepting, let runs finish within the grace period,
	// then cut the rest off and release their records.
	graceCtx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	var wg sync.WaitGroup
	var drainErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		drainErr = drain.Shutdown(graceCtx)
	}()
	if err := srv.Shutdown(graceCtx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	wg.Wait()
	// The runs cut off answer 503: let their connections send it before
	// the process ends.
	final, cancelFinal := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancelFinal()
	if err := srv.Shutdown(final); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	msg := ""
	if drainErr != nil {
		msg = drainErr.Error()
	}
	logger.Info("stopped", "drain", msg)
	return nil
}
