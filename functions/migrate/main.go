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
// The purge check is a function of its own (functions/purge-check), which
// logs in as a user with one privilege rather than as the master user.
//
// It is wiring only: the settings are read once, at cold start, by package
// taskfn; each invocation opens its connections and closes them.
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

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	if err := run(); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("migrate: cannot start", "error", err.Error())
		if os.Getenv("AWS_LAMBDA_RUNTIME_API") != "" {
			// Inside Lambda: answer CloudFormation's request with the error
			// rather than leave the deploy waiting for a reply.
			lambda.Start(failedStart(err).Handle)
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
	if m, err = m.WithSetup(os.Getenv("DB_SETUP_MIGRATE_USER"), os.Getenv("DB_SETUP_APP_USER"), os.Getenv("DB_SETUP_CHECK_USER")); err != nil {
		return err
	}
	slog.SetDefault(slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	cr := &dbsetup.CustomResource{
		ResourceID: taskfn.SetupResourceID,
		Setup: func(ctx context.Context) (dbsetup.Summary, error) {
			sum, err := m.Up(ctx)
			if sum.Setup != nil {
				return *sum.Setup, err
			}
			out := dbsetup.Summary{Version: sum.Version}
			for _, a := range sum.Applied {
				out.Applied = append(out.Applied, a.Name)
			}
			return out, err
		},
		Other: m.Handle,
	}
	lambda.Start(cr.Handle)
	return nil
}

// failedStart answers CloudFormation's requests FAILED with err (Delete
// SUCCESS, so that a broken stack can be deleted), and any other event
// with err.
func failedStart(err error) *dbsetup.CustomResource {
	return &dbsetup.CustomResource{
		ResourceID: taskfn.SetupResourceID,
		Setup:      func(context.Context) (dbsetup.Summary, error) { return dbsetup.Summary{}, err },
		Other:      func(context.Context, json.RawMessage) (any, error) { return nil, err },
	}
}
