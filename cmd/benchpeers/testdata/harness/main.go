// Command harness runs ichido's replay beside gopotency v1.0.0's, the
// library itself, on one PostgreSQL. It is built outside the repository by
// cmd/benchpeers, with ichido's modules installed from a proxy of the
// working tree, as a user installs them.
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/aws/aws-lambda-go/events"
	gopo "github.com/fco-gt/gopotency"
	gopohttp "github.com/fco-gt/gopotency/middleware/http"
	gopostore "github.com/fco-gt/gopotency/storage/sql"
	"github.com/google/uuid"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

// The request both libraries protect, and the handler's answer.
const (
	body     = `{"title":"Write the deploy guide","due_date":"2026-12-31"}`
	answer   = `{"id":"0b5f3b4e-8c1d-4c1e-9d4a-6f3e2c1b0a99","title":"Write the deploy guide","due_date":"2026-12-31","status":"open"}`
	location = "/tasks/0b5f3b4e-8c1d-4c1e-9d4a-6f3e2c1b0a99"
)

type side struct {
	name string
	op   func(ctx context.Context) error
}

func main() {
	url := flag.String("database-url", "", "PostgreSQL URL (the harness works in a schema of its own and drops it)")
	reps := flag.Int("reps", 7, "repetitions")
	rounds := flag.Int("rounds", 3000, "turns per repetition at one client")
	dur := flag.Duration("dur", 2*time.Second, "time of each side in each repetition at eight clients")
	flag.Parse()
	ctx := context.Background()
	sides, cleanup, err := setUp(ctx, *url)
	if err != nil {
		log.Fatal(err)
	}
	defer cleanup()
	for _, s := range sides { // warm each side: connections, plans, pools
		for range 1000 {
			if err := s.op(ctx); err != nil {
				log.Fatalf("%s: %v", s.name, err)
			}
		}
	}

	// One client: turn by turn, each turn calls every side once in an
	// order that rotates, so that all meet the machine in the same moments.
	p50 := make([][]float64, len(sides))
	for rep := range *reps {
		durs := make([][]float64, len(sides))
		for i := range *rounds {
			for j := range sides {
				k := (i + j + rep) % len(sides)
				t0 := time.Now()
				if err := sides[k].op(ctx); err != nil {
					log.Fatalf("%s: %v", sides[k].name, err)
				}
				durs[k] = append(durs[k], float64(time.Since(t0).Nanoseconds())/1e3)
			}
		}
		for k := range sides {
			p50[k] = append(p50[k], median(durs[k]))
		}
	}
	// Eight clients: each side in turn, the order rotating per repetition.
	rate := make([][]float64, len(sides))
	cpu := make([][]float64, len(sides))
	for rep := range *reps {
		for j := range sides {
			k := (j + rep) % len(sides)
			before := processCPU()
			r, n := eight(ctx, sides[k], *dur)
			rate[k] = append(rate[k], r)
			cpu[k] = append(cpu[k], float64((processCPU()-before).Nanoseconds())/1e3/float64(n))
		}
	}

	fmt.Printf("PostgreSQL %s on a direct connection over loopback, %d repetitions: at one client %d turns each, at eight clients %s per side.\n\n", serverVersion(ctx, *url), *reps, *rounds, *dur)
	fmt.Printf("| side | 1 client: p50 (µs) | p50 per repetition | 8 clients: requests/s | requests/s per repetition | client CPU per request, 8 clients (µs) |\n|---|---|---|---|---|---|\n")
	for k, s := range sides {
		fmt.Printf("| %s | %.1f | %s | %.0f | %s | %.1f |\n", s.name, median(p50[k]), list(p50[k], "%.1f"), median(rate[k]), list(rate[k], "%.0f"), median(cpu[k]))
	}
	fmt.Println()
	ratio := func(a, b string) {
		ia, ib := index(sides, a), index(sides, b)
		var one, many []float64
		for r := range *reps {
			one = append(one, p50[ia][r]/p50[ib][r])
			many = append(many, rate[ia][r]/rate[ib][r])
		}
		fmt.Printf("- %s against %s: one client %.2f× the time (repetitions %s); eight clients %.2f× the requests/s (repetitions %s)\n",
			a, b, median(one), list(one, "%.2f"), median(many), list(many, "%.2f"))
	}
	ratio(sideWrap, sideGopotency)
	ratio(sideMiddleware, sideGopotency)
	ratio(sideQuiet, sideGopotency)
	ratio(sideClaim, sideGopotencyGet)
}

const (
	sideFloorPool    = "`SELECT 1`, dbpool (prepared mode)"
	sideFloorSQL     = "`SELECT 1`, database/sql (pgx's driver)"
	sideWrap         = "ichido: Wrap replay (Lambda, API Gateway v2)"
	sideMiddleware   = "ichido: Middleware replay (net/http)"
	sideQuiet        = "ichido: Middleware replay, its log line discarded"
	sideClaim        = "ichido: the store's claim alone"
	sideGopotency    = "gopotency: middleware replay (net/http)"
	sideGopotencyGet = "gopotency: the store's Get alone"
	sideHandler      = "net/http: the handler alone, unprotected"
)

func index(sides []side, name string) int {
	return slices.IndexFunc(sides, func(s side) bool { return s.name == name })
}

func eight(ctx context.Context, s side, dur time.Duration) (float64, int64) {
	var n atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	stop := start.Add(dur)
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				if err := s.op(ctx); err != nil {
					log.Fatalf("%s: %v", s.name, err)
				}
				n.Add(1)
			}
		})
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds(), n.Load()
}

func serverVersion(ctx context.Context, url string) string {
	pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: url, MaxConns: 1})
	if err != nil {
		return "(unknown version)"
	}
	defer pool.Close()
	var v string
	if err := pool.QueryRow(ctx, "SHOW server_version").Scan(&v); err != nil {
		return "(unknown version)"
	}
	return v
}

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func median(xs []float64) float64 {
	ys := slices.Clone(xs)
	sort.Float64s(ys)
	return ys[len(ys)/2]
}

func list(xs []float64, format string) string {
	var s []string
	for _, x := range xs {
		s = append(s, fmt.Sprintf(format, x))
	}
	return strings.Join(s, ", ")
}

func handler(w http.ResponseWriter, r *http.Request) {
	_, _ = io.Copy(io.Discard, r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Location", location)
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, answer)
}

func setUp(ctx context.Context, url string) ([]side, func(), error) {
	schema := "peers_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:12]
	admin, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: url, MaxConns: 2})
	if err != nil {
		return nil, nil, err
	}
	cleanup := func() {
		_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		admin.Close()
	}
	// gopotency's tables, as its storage/sql SCHEMA.md gives them.
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+schema+`;
CREATE TABLE `+schema+`.idempotency_records (key VARCHAR(255) PRIMARY KEY, data BYTEA NOT NULL, expires_at TIMESTAMP WITH TIME ZONE NOT NULL);
CREATE INDEX ON `+schema+`.idempotency_records (expires_at);
CREATE TABLE `+schema+`.idempotency_records_locks (key VARCHAR(255) PRIMARY KEY, expires_at TIMESTAMP WITH TIME ZONE NOT NULL)`); err != nil {
		cleanup()
		return nil, nil, err
	}
	if _, err := pgstore.Migrate(ctx, admin, &pgstore.MigrateOptions{Schema: schema}); err != nil {
		cleanup()
		return nil, nil, err
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	scoped := url + sep + "options=-csearch_path%3D" + schema
	// A direct connection: dbpool's prepared mode for ichido, database/sql
	// with pgx's driver (which prepares too) for gopotency.
	pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: scoped, MaxConns: 8, QueryMode: dbpool.QueryModePrepared})
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	db, err := sql.Open("pgx", scoped)
	if err != nil {
		cleanup()
		return nil, nil, err
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	done := func() { db.Close(); pool.Close(); cleanup() }
	fail := func(err error) ([]side, func(), error) { done(); return nil, nil, err }

	st, err := pgstore.New(pool, nil)
	if err != nil {
		return fail(err)
	}
	// The log line goes where Lambda or a container would read it, here
	// /dev/null; the metric line too in Lambda (Wrap), while a server's
	// default is none (Settings.Metrics is io.Discard outside Lambda).
	devnull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		return fail(err)
	}
	logger := slog.New(slog.NewJSONHandler(devnull, nil))
	user := uuid.NewString()
	mw, err := idempotency.Middleware(idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: logger},
		Subject: idempotency.ContextSubject(func(context.Context) string { return user })})
	if err != nil {
		return fail(err)
	}
	ichidoHTTP := mw(http.HandlerFunc(handler))
	// The same, its log line formatted but discarded: what writing it costs.
	quiet, err := idempotency.Middleware(idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: slog.New(slog.NewJSONHandler(io.Discard, nil))},
		Subject: idempotency.ContextSubject(func(context.Context) string { return user })})
	if err != nil {
		return fail(err)
	}
	ichidoQuiet := quiet(http.HandlerFunc(handler))
	wrapped, err := idempotency.Wrap(func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		return events.APIGatewayV2HTTPResponse{StatusCode: http.StatusCreated, Body: answer,
			Headers: map[string]string{"Content-Type": "application/json", "Location": location}}, nil
	}, idempotency.Config{Store: st, Settings: idempotency.Settings{Logger: logger, Metrics: devnull}})
	if err != nil {
		return fail(err)
	}
	gopoStore := gopostore.NewSQLStorage(db, "idempotency_records")
	manager, err := gopo.NewManager(gopo.Config{Storage: gopoStore, TTL: 24 * time.Hour})
	if err != nil {
		return fail(err)
	}
	gopoHTTP := gopohttp.Idempotency(manager)(http.HandlerFunc(handler))

	// Each net/http side gets a new request and recorder per call, as a
	// server makes them; the handler alone shows what that costs.
	serve := func(h http.Handler, key string, replayed bool) func(ctx context.Context) error {
		return func(ctx context.Context) error {
			r := httptest.NewRequestWithContext(ctx, http.MethodPost, "/tasks", strings.NewReader(body))
			r.Header.Set("Idempotency-Key", key)
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != http.StatusCreated || w.Body.String() != answer {
				return fmt.Errorf("status %d: %s", w.Code, w.Body)
			}
			if replayed && w.Header().Get("Idempotent-Replayed") == "" && w.Header().Get("X-Idempotent-Replayed") == "" {
				return fmt.Errorf("not a replay: %v", w.Header())
			}
			return nil
		}
	}
	ichidoKey, quietKey, gopoKey := uuid.NewString(), uuid.NewString(), uuid.NewString()
	ev := events.APIGatewayV2HTTPRequest{RawPath: "/tasks", Body: body,
		Headers: map[string]string{"idempotency-key": uuid.NewString(), "content-type": "application/json"}}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}}}
	// The first requests of the replayed keys.
	if err := serve(ichidoHTTP, ichidoKey, false)(ctx); err != nil {
		return fail(err)
	}
	if err := serve(ichidoQuiet, quietKey, false)(ctx); err != nil {
		return fail(err)
	}
	if err := serve(gopoHTTP, gopoKey, false)(ctx); err != nil {
		return fail(err)
	}
	if _, err := wrapped(ctx, ev); err != nil {
		return fail(err)
	}
	claimRef := idemstore.Ref{UserID: user, Key: uuid.NewString(), Owner: uuid.NewString()}
	now := time.Now()
	if _, err := st.Claim(ctx, idemstore.Claim{Ref: claimRef, Fingerprint: "ab", Now: now, LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(24 * time.Hour)}); err != nil {
		return fail(err)
	}
	if err := st.Complete(ctx, idemstore.Completion{Ref: claimRef, Now: now, ExpiresAt: now.Add(24 * time.Hour),
		Response: idemstore.Response{StatusCode: http.StatusCreated, Headers: map[string]string{"Content-Type": "application/json", "Location": location}, Body: answer}}); err != nil {
		return fail(err)
	}

	sides := []side{
		{sideFloorPool, func(ctx context.Context) error { var n int; return pool.QueryRow(ctx, "SELECT 1").Scan(&n) }},
		{sideFloorSQL, func(ctx context.Context) error { var n int; return db.QueryRowContext(ctx, "SELECT 1").Scan(&n) }},
		{sideWrap, func(ctx context.Context) error {
			resp, err := wrapped(ctx, ev)
			if err == nil && (resp.StatusCode != http.StatusCreated || resp.Headers[idempotency.ReplayedHeader] != "true") {
				err = fmt.Errorf("not a replay: status %d, headers %v", resp.StatusCode, resp.Headers)
			}
			return err
		}},
		{sideMiddleware, serve(ichidoHTTP, ichidoKey, true)},
		{sideQuiet, serve(ichidoQuiet, quietKey, true)},
		{sideClaim, func(ctx context.Context) error {
			t := time.Now()
			res, err := st.Claim(ctx, idemstore.Claim{Ref: idemstore.Ref{UserID: claimRef.UserID, Key: claimRef.Key, Owner: uuid.NewString()},
				Fingerprint: "ab", Now: t, LeaseUntil: t.Add(time.Minute), ExpiresAt: t.Add(24 * time.Hour)})
			if err == nil && (res.Claimed || res.Record.Response == nil) {
				err = fmt.Errorf("not a replay")
			}
			return err
		}},
		{sideGopotency, serve(gopoHTTP, gopoKey, true)},
		{sideGopotencyGet, func(ctx context.Context) error {
			rec, err := gopoStore.Get(ctx, gopoKey)
			if err == nil && rec == nil {
				err = fmt.Errorf("no record")
			}
			return err
		}},
		{sideHandler, serve(http.HandlerFunc(handler), "unused", false)},
	}
	return sides, done, nil
}
