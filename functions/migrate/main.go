// Command migrate is the MigrateFunction Lambda function: it prepares the
// deployed database (package dbsetup: the database users, their privileges,
// the migrations and the pg_cron jobs). The stack's DatabaseSetup custom
// resource invokes it on every deploy that changes the function or the
// setup's settings, and it answers CloudFormation through the request's
// pre-signed S3 URL; a failed setup fails the deploy. Invoked with any
// other JSON event it runs the same setup and answers a summary:
//
//	sam remote invoke MigrateFunction --event '{}'
//
// It is wiring only: the settings are read once, at cold start, by package
// taskfn; each invocation opens its connections and closes them.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/migrate
package main

import (
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	if err := run(); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("migrate: cannot start", "error", err.Error())
		if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
			// Inside Lambda: answer CloudFormation's request with the error
			// rather than leave the deploy waiting for a reply.
			lambda.Start(taskfn.FailedStart(err))
		}
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
	// The deployed function sets the database up; local runs (env.json
	// leaves these empty) only migrate.
	if m, err = m.WithSetup(os.Getenv("DB_SETUP_MIGRATE_USER"), os.Getenv("DB_SETUP_APP_USER")); err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	lambda.Start(m.Handle)
	return nil
}
