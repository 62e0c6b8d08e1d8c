package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// handler is an API Gateway HTTP API (payload 2.0) Lambda handler.
type handler = func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error)

// FloorResult compares the cheapest round trip through a pool with the
// decorator's replay and first-request paths around a handler that does
// nothing, one client at a time.
type FloorResult struct {
	// Postgres: "floor (SELECT 1)", "replay", "first request", "claim alone
	// (completed key)", "no-op call, claim's shape".
	Postgres []Side `json:"postgres"`
	// Redis: the same with "floor (PING)".
	Redis []Side `json:"redis,omitempty"`
}

// noop is a handler that does nothing but answer.
func noop(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{
		StatusCode: http.StatusCreated,
		Headers:    map[string]string{"Content-Type": "application/json"},
		Body:       benchTaskBody,
	}, nil
}

// benchTaskBody is the answer of noop.
const benchTaskBody = `{"id":"0b6e9d9e-8f1f-4c55-9a0e-3f9d1c2b7a11","title":"bench task"}`

// postEvent is a POST with an Idempotency-Key by an authenticated user, as
// the HTTP API's JWT authorizer hands it to a function.
func postEvent(path, user, key, body string) events.APIGatewayV2HTTPRequest {
	ev := events.APIGatewayV2HTTPRequest{
		Version:  "2.0",
		RouteKey: "POST " + path,
		RawPath:  path,
		Headers: map[string]string{
			"content-type":    "application/json",
			"idempotency-key": key,
		},
		Body: body,
	}
	ev.RequestContext.HTTP.Method = http.MethodPost
	ev.RequestContext.HTTP.Path = path
	ev.RequestContext.RequestID = uuid.NewString()
	ev.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{Claims: map[string]string{"sub": user}},
	}
	return ev
}

const taskBody = `{"title":"bench task","description":"measured by cmd/bench"}`

// wrap protects h with store as the functions do; the log and metric lines
// are formatted and written to /dev/null, as Lambda would ship them.
func (b *bench) wrap(h handler, store idemstore.Store) (handler, error) {
	return idempotency.Wrap(h, idempotency.Config{
		Store: store,
		Settings: idempotency.Settings{
			Logger:  slog.New(slog.NewJSONHandler(b.devnull, nil)),
			Metrics: b.devnull,
		},
	})
}

// decoratorSides returns the replay and first-request operations of h
// wrapped with store.
func (b *bench) decoratorSides(ctx context.Context, store idemstore.Store) ([]sideSpec, error) {
	h, err := b.wrap(noop, store)
	if err != nil {
		return nil, err
	}
	user := uuid.NewString()
	replayEv := postEvent("/noop", user, uuid.NewString(), taskBody)
	if _, err := call(ctx, h, replayEv, false); err != nil {
		return nil, fmt.Errorf("first request of the replayed key: %w", err)
	}
	replay := func(ctx context.Context, _ int) (time.Duration, error) {
		return call(ctx, h, replayEv, true)
	}
	first := func(ctx context.Context, _ int) (time.Duration, error) {
		return call(ctx, h, postEvent("/noop", user, uuid.NewString(), taskBody), false)
	}
	return []sideSpec{{"replay", replay}, {"first request", first}}, nil
}

// claimAloneSide is the store's Claim of a completed key without the
// decorator around it: the replay's one round trip on its own, to tell the
// statement's cost from the decorator's.
func claimAloneSide(store idemstore.Store) sideSpec {
	ref := idemstore.Ref{UserID: uuid.NewString(), Key: uuid.NewString(), Owner: uuid.NewString()}
	var once error
	completed := false
	return sideSpec{"claim alone (completed key)", func(ctx context.Context, _ int) (time.Duration, error) {
		if !completed {
			if once = claimNew(ctx, store, ref); once == nil {
				now := time.Now()
				once = store.Complete(ctx, idemstore.Completion{Ref: ref, Response: storedResponse, Now: now, ExpiresAt: now.Add(idempotency.DefaultTTL)})
			}
			if once != nil {
				return 0, once
			}
			completed = true
		}
		again := idemstore.Ref{UserID: ref.UserID, Key: ref.Key, Owner: uuid.NewString()}
		start := time.Now()
		now := time.Now()
		res, err := store.Claim(ctx, idemstore.Claim{
			Ref: again, Fingerprint: requestHash, Now: now,
			LeaseUntil: now.Add(time.Minute), ExpiresAt: now.Add(idempotency.DefaultTTL),
		})
		d := time.Since(start)
		if err == nil && (res.Claimed || res.Record.Status != idemstore.StatusCompleted) {
			err = errors.New("a completed key was claimed again")
		}
		return d, err
	}}
}

// noopShapeFunction answers at once: a PL/pgSQL function with the claim's
// seven arguments that does nothing. Called as the claim is, it is the floor
// of a claim that is one function call: what the driver, the protocol and
// the server spend on such a call before the function reads anything.
const noopShapeFunction = `CREATE OR REPLACE FUNCTION bench_noop_claim(
	p_user_id uuid, p_key text, p_request_hash text, p_owner text,
	p_now timestamptz, p_lease_until timestamptz, p_expires_at timestamptz)
RETURNS text LANGUAGE plpgsql AS $$ BEGIN RETURN 'C'; END $$`

// noopShapeSide calls bench_noop_claim as pgstore calls the claim, with
// the same argument types.
func noopShapeSide(pool interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) sideSpec {
	user, key, owner := uuid.NewString(), uuid.NewString(), uuid.NewString()
	return sideSpec{noopShapeName, func(ctx context.Context, _ int) (time.Duration, error) {
		start := time.Now()
		now := time.Now()
		var answer string
		err := pool.QueryRow(ctx, `SELECT bench_noop_claim($1::uuid, $2::text, $3::text, $4::text, $5::timestamptz, $6::timestamptz, $7::timestamptz)`,
			user, key, requestHash, owner, now, now.Add(time.Minute), now.Add(idempotency.DefaultTTL)).Scan(&answer)
		return time.Since(start), err
	}}
}

// noopShapeName names the no-op call's side.
const noopShapeName = "no-op call, claim's shape"

// call invokes h and checks that the answer is the handler's 201, replayed
// or not as expected.
func call(ctx context.Context, h handler, ev events.APIGatewayV2HTTPRequest, replayed bool) (time.Duration, error) {
	start := time.Now()
	resp, err := h(ctx, ev)
	d := time.Since(start)
	if err != nil {
		return d, err
	}
	if resp.StatusCode != http.StatusCreated {
		return d, fmt.Errorf("status %d: %s", resp.StatusCode, resp.Body)
	}
	if got := resp.Headers[idempotency.ReplayedHeader] == "true"; got != replayed {
		return d, fmt.Errorf("replayed header %v, want %v", got, replayed)
	}
	return d, nil
}

func (b *bench) floor(ctx context.Context) error {
	cfg := b.cfg
	p := plan{reps: cfg.reps, clients: 1, dur: cfg.floorDur, maxOps: cfg.maxOps, warm: cfg.warm}
	res := &FloorResult{}
	b.res.Floor = res

	pool, err := b.db.newPool(ctx, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	selectOne := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error {
			var n int
			return pool.QueryRow(ctx, "SELECT 1").Scan(&n)
		})
	}
	if _, err := pool.Exec(ctx, noopShapeFunction); err != nil {
		return fmt.Errorf("creating the no-op function: %w", err)
	}
	store := mustStore(pgstore.New(pool, nil))
	dec, err := b.decoratorSides(ctx, store)
	if err != nil {
		return err
	}
	dec = append(dec, claimAloneSide(store), noopShapeSide(pool))
	if res.Postgres, err = compare(ctx, p, append([]sideSpec{{"floor (SELECT 1)", selectOne}}, dec...)); err != nil {
		return err
	}
	logSides("postgres", res.Postgres)

	if b.redis == nil {
		return nil
	}
	ping := func(ctx context.Context, _ int) (time.Duration, error) {
		return timed(func() error { return b.redis.Ping(ctx).Err() })
	}
	rstore := mustStore(redisstore.New(b.redis, nil))
	if dec, err = b.decoratorSides(ctx, rstore); err != nil {
		return err
	}
	dec = append(dec, claimAloneSide(rstore))
	if res.Redis, err = compare(ctx, p, append([]sideSpec{{"floor (PING)", ping}}, dec...)); err != nil {
		return err
	}
	logSides("redis", res.Redis)
	return nil
}
