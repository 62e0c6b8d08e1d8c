package reliability

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/localapi"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/must"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

type subjectKey struct{}

// netHTTPServer is the nethttp worker's server: POST /tasks, the task API's
// create, behind idempotency.Middleware on a plain net/http server (no
// gateway, so no deadline: the lease is the heartbeat's), with the spy
// counting runs and ICHIDO_RELIABILITY_BLOCK making a victim.
func netHTTPServer(pool *pgxpool.Pool, runs *runCounter) (http.Handler, error) {
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	cfg := idempotency.Config{
		Store:   must.Value(pgstore.New(pool, nil)),
		Subject: idempotency.ContextSubject(func(ctx context.Context) string { s, _ := ctx.Value(subjectKey{}).(string); return s }),
		Settings: idempotency.Settings{
			Logger:  logger,
			Metrics: io.Discard,
		},
	}
	switch s := os.Getenv(envHeartbeat); s {
	case "":
	case "off":
		cfg.Heartbeat = idempotency.HeartbeatOff
	default:
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envHeartbeat, err)
		}
		cfg.Heartbeat = d
	}
	if s := os.Getenv(envMaxLease); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", envMaxLease, err)
		}
		cfg.MaxLease = d
	}
	mw, err := idempotency.Middleware(cfg)
	if err != nil {
		return nil, err
	}
	api := tasks.NewAPI(tasks.NewService(pool), &tasks.Options{Logger: logger})
	block := os.Getenv(envBlock)
	create := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, _ := idempotency.FromContext(r.Context())
		runs.add(r.Method, info.Key)
		if block == "before" {
			select {} // claimed, never finishes: the process is killed
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, "unreadable body", http.StatusBadRequest)
			return
		}
		ev := events.APIGatewayV2HTTPRequest{Version: "2.0", RouteKey: "POST /tasks", RawPath: r.URL.Path, Body: string(body),
			Headers: map[string]string{"content-type": r.Header.Get("Content-Type"), "idempotency-key": r.Header.Get("Idempotency-Key")}}
		ev.RequestContext.HTTP.Method, ev.RequestContext.HTTP.Path = r.Method, r.URL.Path
		ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
			JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": info.UserID}},
		}
		resp, err := api.Create(r.Context(), ev)
		if err != nil {
			panic(err) // the middleware releases the key
		}
		for name, v := range resp.Headers {
			w.Header().Set(name, v)
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.WriteString(w, resp.Body)
	})
	protected := mw(create)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := localapi.Authorize(r.Header.Get("Authorization"), time.Now())
		if err != nil || r.Method != http.MethodPost || r.URL.Path != "/tasks" {
			http.Error(w, "no route or no token", http.StatusNotFound)
			return
		}
		protected.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), subjectKey{}, strings.ToLower(id.Claims["sub"]))))
	}), nil
}

// TestKilledHTTPServer kills (SIGKILL) a net/http server mid-request, after
// it claimed the key: a net/http request has no deadline, so its lease is
// one heartbeat, renewed while it runs; the dead server renews no more, and
// the client's retry to another server runs once the heartbeat's lease is
// over. It measures the time from the kill to the retry that ran, and shows
// the lease the same request held with the heartbeat off (MaxLease).
func TestKilledHTTPServer(t *testing.T) {
	t.Parallel()
	const heartbeat = time.Second
	rounds := scale(1, 5)
	db := apptest.New(t)
	ctx := context.Background()
	env := workerEnv(db.URL, map[string]string{envHeartbeat: heartbeat.String()})
	survivor := startWorker(t, modeNetHTTP, env)

	// lease reads how long the claimed record's lease still runs.
	lease := func(user, key string) time.Duration {
		var until time.Time
		var status string
		require.NoError(t, db.Pool.QueryRow(ctx,
			`SELECT status, lease_expires_at FROM idempotency_keys WHERE user_id = $1 AND key = $2`, user, key).Scan(&status, &until))
		require.Equal(t, "in_progress", status)
		return time.Until(until)
	}
	// claimAndKill sends a create to a new victim, waits until it runs the
	// handler, reads the lease and kills the victim.
	claimAndKill := func(victimEnv map[string]string, c call, user, key string) (time.Duration, time.Time) {
		victim := startWorker(t, modeNetHTTP, victimEnv)
		tok := token(t, user)
		go func() { _, _ = send(ctx, victim.URL, c, tok) }() // never answered: the server dies
		require.Eventually(t, func() bool { return victim.stats(t, false).Runs["POST "+key] == 1 },
			10*time.Second, 10*time.Millisecond, "the victim never ran the handler")
		held := lease(user, key)
		victim.kill(t)
		return held, time.Now()
	}

	var waits []time.Duration
	var probes int
	var heartbeatLease time.Duration
	for round := range rounds {
		user, key := newUser(), newKey()
		c := call{method: http.MethodPost, path: "/tasks", keys: []string{key}, body: taskBody(fmt.Sprintf("net/http killed, round %d", round)), sub: user}
		held, killed := claimAndKill(workerEnv(db.URL, map[string]string{envHeartbeat: heartbeat.String(), envBlock: "before"}), c, user, key)
		heartbeatLease = held
		require.LessOrEqual(t, held, heartbeat, "the lease runs at most one heartbeat ahead (renewed), not MaxLease")

		// The client retries against another server until the retry runs.
		var ran answer
		for {
			a := do(t, survivor.URL, c)
			if a.status != http.StatusConflict {
				ran = a
				break
			}
			require.Equal(t, idempotency.CodeKeyInUse, a.problem(t).Code)
			probes++
			require.Less(t, time.Since(killed), heartbeat+5*time.Second, "the key is still held long after one heartbeat")
			time.Sleep(50 * time.Millisecond)
		}
		waits = append(waits, time.Since(killed))
		require.Equal(t, http.StatusCreated, ran.status, "%s", ran.body)
		require.False(t, ran.replayed())
		require.Equal(t, 1, survivor.stats(t, false).Runs["POST "+key], "the retry runs the handler exactly once")
		again := do(t, survivor.URL, c)
		require.True(t, again.replayed())
		require.Equal(t, ran.body, again.body)
		require.Equal(t, 1, tasksWithKey(t, db, user, key))
	}

	// The same crash with the heartbeat off: the key is held for MaxLease.
	user, key := newUser(), newKey()
	c := call{method: http.MethodPost, path: "/tasks", keys: []string{key}, body: taskBody("net/http killed, heartbeat off"), sub: user}
	offLease, _ := claimAndKill(workerEnv(db.URL, map[string]string{envHeartbeat: "off", envBlock: "before"}), c, user, key)
	require.InDelta(t, idempotency.DefaultMaxLease.Seconds(), offLease.Seconds(), 5)
	a := do(t, survivor.URL, c)
	require.Equal(t, http.StatusConflict, a.status, "with the heartbeat off the dead server's key is still held")

	require.Zero(t, duplicateTasks(t, db.Pool))
	longest := waits[0]
	var sum time.Duration
	for _, w := range waits {
		sum += w
		longest = max(longest, w)
	}
	record(t, Result{
		Case: "net/http server killed mid-request",
		Tried: fmt.Sprintf("a net/http server (idempotency.Middleware, no deadline, Heartbeat %v) claims a key, its create handler blocks before inserting the task; SIGKILL; the client retries the same request against another server every 50ms until it runs; then the same crash with the heartbeat off",
			heartbeat),
		Times: rounds,
		Seen: fmt.Sprintf("at the kill the lease ran %v more (at most one heartbeat, renewed while the request runs); the retry ran %v after the kill on average (longest %v), after %d × 409 idempotency_key_in_use, once, then byte-exact replays; with the heartbeat off the dead server's lease ran %v more (MaxLease) and the retry got 409",
			heartbeatLease.Round(time.Millisecond), (sum / time.Duration(len(waits))).Round(10*time.Millisecond), longest.Round(10*time.Millisecond), probes, offLease.Round(time.Second)),
		Lost: lostSummary(map[string]int{"duplicate tasks": duplicateTasks(t, db.Pool)}),
	})
}
