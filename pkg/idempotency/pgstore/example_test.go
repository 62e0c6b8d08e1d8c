package pgstore_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/pgstore"
)

func createTask(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return events.APIGatewayV2HTTPResponse{StatusCode: 201, Body: `{"id":"1"}`}, nil
}

// A Lambda protects its handler with a store on the pool it built at cold
// start. Through RDS Proxy or PgBouncer the pool uses a query exec mode
// without named prepared statements; pgstore's statements work in any mode.
func Example() {
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

	handler, err := idempotency.Wrap(createTask, idempotency.Config{Store: pgstore.New(pool, nil)})
	if err != nil {
		log.Fatal(err)
	}
	_ = handler // lambda.Start(handler)
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
	store := pgstore.New(pool, &pgstore.Options{Schema: res.Schema})
	handler, err := idempotency.Wrap(createTask, idempotency.Config{Store: store})
	if err != nil {
		log.Fatal(err)
	}
	_ = handler // lambda.Start(handler)
}
