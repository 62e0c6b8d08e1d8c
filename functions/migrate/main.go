// Command migrate is the MigrateFunction Lambda function: it applies the
// embedded migrations/ to the deployed database and answers a summary of
// what it applied. Invoke it after a deploy, with any JSON event:
//
//	sam remote invoke MigrateFunction --event '{}'
//
// It is wiring only: the database settings are read once, at cold start, by
// package taskfn; each invocation opens a connection, migrates and closes it.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/migrate
package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	if err := run(); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("migrate: cannot start", "error", err.Error())
		os.Exit(1)
	}
}

// run reads the settings and serves invocations until the execution
// environment ends. It returns only when the function cannot start.
func run() error {
	m, err := taskfn.NewMigrator(os.Getenv)
	if err != nil {
		return err
	}
	lambda.Start(func(ctx context.Context, _ json.RawMessage) (taskfn.MigrationSummary, error) {
		return m.Up(ctx)
	})
	return nil
}
