// Command task-activity is the TaskActivityFunction Lambda function: it
// reads the task-events SQS queue and records one activity entry per task
// event, exactly once, reporting the records to retry (batchItemFailures).
// It is wiring only: package taskfn builds the function from the
// environment once, at cold start, and serves its invocations.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/task-activity
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	if err := taskfn.ServeActivity(context.Background(), os.Getenv); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("task-activity: cannot start", "error", err.Error())
		os.Exit(1)
	}
}
