// Command purge-check is the PurgeCheckFunction Lambda function: on the
// template's hourly schedule (daily in dev) it reads whether pg_cron's
// purge jobs do their work (dbsetup.PurgeCheck: their runs and the key
// table) and prints it as CloudWatch embedded metrics, which the stack's
// purge alarm watches. Any event runs the check.
//
// It logs in as the check user (DB_USER), which the database setup creates
// with one privilege: calling the function that reads the purge's health.
// Its execution role may connect as that user only.
//
// It is wiring only: the settings are read once, at cold start; each
// invocation opens one connection and closes it.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/purge-check
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/pkg/dbpool"
)

func main() {
	if err := run(); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("purge-check: cannot start", "error", err.Error())
		os.Exit(1)
	}
}

// run reads the settings and serves invocations until the execution
// environment ends. It returns only when the function cannot start.
func run() error {
	db, err := dbpool.ConfigFromEnv(os.Getenv)
	if err != nil {
		return err
	}
	check := &dbsetup.PurgeCheck{FunctionName: os.Getenv("AWS_LAMBDA_FUNCTION_NAME")}
	lambda.Start(func(ctx context.Context, _ json.RawMessage) (dbsetup.PurgeHealth, error) {
		pool, err := dbpool.New(ctx, db)
		if err != nil {
			return dbsetup.PurgeHealth{}, err
		}
		defer pool.Close()
		return check.Run(ctx, pool, os.Stdout)
	})
	return nil
}
