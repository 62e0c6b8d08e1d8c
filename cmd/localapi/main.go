// Command localapi serves the task API on a loopback address as API
// Gateway would serve it when deployed: the routes of template.yaml, the
// JWT authorizer (emulated: tokens are read, not verified), payload format
// 2.0 events, and the functions of package taskfn running in process. It is
// what `make run` starts.
//
//	localapi [-addr 127.0.0.1:3000] [-template template.yaml] [-migrate=true]
//
// It takes its port before anything else, so that an address another
// process holds fails at once, with the way to choose another port
// (make run PORT=8081). Without DATABASE_URL in its environment it starts the project's private
// PostgreSQL (with pg_cron) under .local/, installing the server through
// apt first when it is missing and the command runs as root. With
// DATABASE_URL it uses that database. Either way it applies the migrations
// (unless -migrate=false), prints DATABASE_URL=… and a ready line on
// standard output, writes one access log line per request on standard
// error, and on SIGINT or SIGTERM stops serving, closes the functions and
// stops the PostgreSQL server if it started it.
//
// The functions get DB_AUTH=url and that DATABASE_URL; every other variable
// they read (IDEMPOTENCY_STORE, REDIS_URL, IDEMPOTENCY_TABLE, IDEMPOTENCY_TTL,
// LOG_LEVEL, DB_MAX_CONNS, and the AWS SDK's for DynamoDB) comes from this
// command's environment.
//
// ICHIDO_TRACES=stdout (make run TRACES=stdout) gives the functions an
// OpenTelemetry tracer provider whose spans print, as indented JSON, on
// standard error: one span per protected call, named after its method
// ("idempotency POST"), a replay's with a link to the span of the run whose
// answer it replays. The deployed functions have no such option.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/migrate"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		msg := err.Error()
		if !strings.HasPrefix(msg, "localapi: ") {
			msg = "localapi: " + msg
		}
		fmt.Fprintln(os.Stderr, msg)
		os.Exit(1)
	}
}

// DefaultAddr is where the API listens: sam local start-api's port.
const DefaultAddr = "127.0.0.1:3000"

// run serves until ctx is done.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("localapi", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", DefaultAddr, "listen address; must be a loopback address (127.0.0.1, ::1, localhost)")
	templatePath := fs.String("template", "template.yaml", "the SAM template whose HttpApi routes are served")
	doMigrate := fs.Bool("migrate", true, "apply the migrations before serving")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	observer, stopTraces, err := traces(getenv, stderr)
	if err != nil {
		return err
	}
	defer func() { _ = stopTraces(context.WithoutCancel(ctx)) }()
	// Refuse a public address, and take the port, before starting anything.
	ln, err := localapi.Listen(ctx, *addr)
	if errors.Is(err, localapi.ErrAddrInUse) {
		return fmt.Errorf("%w; another process (another make run?) listens there: choose another port with make run PORT=8081, or localapi -addr 127.0.0.1:8081", err)
	}
	if err != nil {
		return err
	}
	defer ln.Close()

	tpl, err := samtemplate.Load(*templatePath)
	if err != nil {
		return err
	}
	routes := templateRoutes(tpl)

	dbURL, stopDB, err := database(ctx, getenv, stderr)
	if err != nil {
		return err
	}
	defer stopDB()
	if *doMigrate {
		if err := migrateUp(ctx, dbURL, stderr); err != nil {
			return err
		}
	}

	fns, err := taskfn.BuildWith(ctx, functionEnv(getenv, dbURL), &taskfn.Options{Observer: observer})
	if err != nil {
		return err
	}
	defer fns.Close()
	handlers := map[string]localapi.Handler{}
	for _, r := range routes {
		h, ok := fns.Handler(r.Function)
		if !ok {
			return fmt.Errorf("%s routes %s to %s, which package taskfn does not provide", *templatePath, r.Key(), r.Function)
		}
		handlers[r.Function] = h
	}
	gw, err := localapi.New(localapi.Config{
		Routes:    routes,
		Handlers:  handlers,
		AccessLog: stderr,
		Logger:    slog.New(slog.NewTextHandler(stderr, nil)),
		Timeout:   functionTimeout(tpl),
		CORS:      templateCORS(tpl),
	})
	if err != nil {
		return err
	}

	srv := &http.Server{Handler: gw, ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	fmt.Fprintf(stdout, "DATABASE_URL=%s\n", dbURL)
	for _, r := range routes {
		fmt.Fprintf(stdout, "  %-24s -> %s\n", r.Key(), r.Function)
	}
	fmt.Fprintf(stdout, "ready: the task API listens on http://%s (%d routes from %s; make token SUB=<uuid> prints a token; Ctrl-C stops)\n",
		ln.Addr(), len(routes), filepath.Base(*templatePath))

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = srv.Shutdown(shutdownCtx)
	fmt.Fprintln(stdout, "stopped")
	return err
}

// templateRoutes converts the template's routes; an HttpApi event without
// a path is the API's $default route.
func templateRoutes(tpl *samtemplate.Template) []localapi.Route {
	var routes []localapi.Route
	for _, r := range tpl.Routes() {
		path := r.Path
		if path == "" {
			path = localapi.DefaultRouteKey
		}
		routes = append(routes, localapi.Route{Method: r.Method, Path: path, Function: r.Function})
	}
	return routes
}

// templateCORS reads the HTTP API's CorsConfiguration: the HttpApi
// resource's, else Globals.HttpApi's. true means any origin; intrinsic
// values are skipped.
func templateCORS(tpl *samtemplate.Template) *localapi.CORS {
	var conf any
	if g, ok := tpl.Section("Globals")["HttpApi"].(map[string]any); ok {
		conf = g["CorsConfiguration"]
	}
	if ids := tpl.ResourceIDs("AWS::Serverless::HttpApi"); len(ids) > 0 {
		if c, ok := tpl.Resources[ids[0]].Properties["CorsConfiguration"]; ok {
			conf = c
		}
	}
	switch c := conf.(type) {
	case bool:
		if c {
			return &localapi.CORS{AllowOrigins: []string{"*"}}
		}
	case map[string]any:
		strs := func(key string) []string {
			var out []string
			list, _ := c[key].([]any)
			for _, v := range list {
				if s, ok := v.(string); ok {
					out = append(out, s)
				}
			}
			return out
		}
		cors := &localapi.CORS{
			AllowOrigins:  strs("AllowOrigins"),
			AllowMethods:  strs("AllowMethods"),
			AllowHeaders:  strs("AllowHeaders"),
			ExposeHeaders: strs("ExposeHeaders"),
		}
		switch v := c["MaxAge"].(type) {
		case int64:
			cors.MaxAge = int(v)
		case float64:
			cors.MaxAge = int(v)
		}
		cors.AllowCredentials, _ = c["AllowCredentials"].(bool)
		return cors
	}
	return nil
}

// functionTimeout is Globals.Function.Timeout of the template (seconds), or
// 0 for the gateway's default.
func functionTimeout(tpl *samtemplate.Template) time.Duration {
	fn, _ := tpl.Section("Globals")["Function"].(map[string]any)
	switch v := fn["Timeout"].(type) {
	case int64:
		return time.Duration(v) * time.Second
	case int:
		return time.Duration(v) * time.Second
	case float64:
		return time.Duration(v * float64(time.Second))
	}
	return 0
}

// functionEnv is the functions' environment: url authentication to dbURL,
// everything else from the command's own environment.
func functionEnv(getenv func(string) string, dbURL string) func(string) string {
	return func(name string) string {
		switch name {
		case "DB_AUTH":
			return "url"
		case "DATABASE_URL":
			return dbURL
		}
		return getenv(name)
	}
}

// database returns the URL to use and a function that stops what was
// started: nothing for DATABASE_URL or a private cluster that was already
// running, the cluster otherwise.
func database(ctx context.Context, getenv func(string) string, stderr io.Writer) (string, func(), error) {
	if u := strings.TrimSpace(getenv("DATABASE_URL")); u != "" {
		return u, func() {}, nil
	}
	wasRunning := sharedRunning(ctx)
	if !wasRunning {
		fmt.Fprintln(stderr, "localapi: starting the private PostgreSQL (pg_cron preloaded) under .local/pg ...")
	}
	c, err := pgtest.StartShared(ctx)
	if err != nil {
		return "", nil, err
	}
	if wasRunning {
		return c.URL(""), func() {}, nil
	}
	return c.URL(""), func() {
		if err := pgtest.StopShared(context.Background()); err != nil {
			fmt.Fprintln(stderr, "localapi:", err)
			return
		}
		fmt.Fprintln(stderr, "localapi: stopped the private PostgreSQL")
	}, nil
}

// sharedRunning reports whether the private cluster runs already (started
// by `make db-start` or a test run), so that stopping the API leaves it up.
func sharedRunning(ctx context.Context) bool {
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(root, ".local", "pg", "state.json"))
	if err != nil {
		return false
	}
	var st struct {
		Dir      string `json:"dir"`
		Port     int    `json:"port"`
		Database string `json:"database"`
	}
	if json.Unmarshal(b, &st) != nil || st.Dir == "" {
		return false
	}
	c, err := pgtest.OpenCluster(ctx, st.Dir, st.Port, st.Database)
	return err == nil && c.Running(ctx)
}

func migrateUp(ctx context.Context, dbURL string, stderr io.Writer) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connecting to DATABASE_URL: %w", err)
	}
	defer pool.Close()
	applied, err := migrate.Up(ctx, pool)
	for _, r := range applied {
		fmt.Fprintf(stderr, "localapi: applied %s\n", r.Name)
	}
	if err != nil {
		return fmt.Errorf("applying migrations: %w", err)
	}
	return nil
}
