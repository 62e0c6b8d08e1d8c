package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func createTask(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"id":"1"}`}, nil
}

// postTask is a request as an HTTP API with a JWT authorizer delivers it.
func postTask(key string) events.APIGatewayV2HTTPRequest {
	req := events.APIGatewayV2HTTPRequest{
		RawPath: "/tasks",
		Headers: map[string]string{"idempotency-key": key},
		Body:    `{"title":"tea"}`,
	}
	req.RequestContext.HTTP.Method = "POST"
	req.RequestContext.Authorizer = &events.APIGatewayV2HTTPRequestContextAuthorizerDescription{
		JWT: &events.APIGatewayV2HTTPRequestContextAuthorizerJWTDescription{
			Claims: map[string]string{"sub": "0d9f6b8e-3c1a-4f5e-8b7d-2a6c9e1f4b3d"},
		},
	}
	return req
}

// A Lambda protects its handler with a store on the pool it built at cold
// start. Through RDS Proxy or PgBouncer the pool uses a query exec mode
// without named prepared statements; pgstore's statements work in any mode.
// The key store must exist (see Migrate); Options.Schema names where.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	if _, err := pgstore.Migrate(ctx, pool, &pgstore.MigrateOptions{Schema: "example_tasks"}); err != nil {
		log.Fatal(err)
	}

	store, err := pgstore.New(pool, &pgstore.Options{Schema: "example_tasks"})
	if err != nil {
		log.Fatal(err)
	}
	handler, err := idempotency.Wrap(createTask, idempotency.Config{Store: store, Settings: idempotency.Settings{Logger: slog.New(slog.DiscardHandler), Metrics: io.Discard}})
	if err != nil {
		log.Fatal(err)
	}
	key := uuid.NewString()
	for range 2 { // lambda.Start(handler) in a function; here a request and its retry
		resp, err := handler(ctx, postTask(key))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%d %s replayed=%q\n", resp.StatusCode, resp.Body, resp.Headers[idempotency.ReplayedHeader])
	}
	// Output:
	// 201 {"id":"1"} replayed=""
	// 201 {"id":"1"} replayed="true"
}

// A service that wraps its own handler keeps the key store in its own
// database and schema: Migrate creates it there (at every start or deploy;
// it applies only what is missing), and New reads the same schema. pg_cron
// is used where it lives; with MigrateOptions{Cron: pgstore.CronOff} call
// CALL <schema>.purge_expired_idempotency_keys() from your own scheduler.
// The same SQL is in Migrations, for a project that runs goose, tern, Atlas
// or Flyway instead.
func ExampleMigrate() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	res, err := pgstore.Migrate(ctx, pool, &pgstore.MigrateOptions{Schema: "orders_idempotency"})
	if err != nil {
		log.Fatal(err) // pgstore.ErrNoPgCron, pgstore.ErrCronElsewhere: nothing was applied
	}
	again, err := pgstore.Migrate(ctx, pool, &pgstore.MigrateOptions{Schema: "orders_idempotency"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(res.Schema, len(again.Applied))
	store, err := pgstore.New(pool, &pgstore.Options{Schema: res.Schema})
	if err != nil {
		log.Fatal(err)
	}
	if _, err := idempotency.Wrap(createTask, idempotency.Config{Store: store}); err != nil {
		log.Fatal(err)
	}
	// Output: orders_idempotency 0
}
