// Command create-task is the CreateTaskFunction Lambda function: POST /tasks of the
// sample task API. It is wiring only: package taskfn builds the function from
// the environment once, at cold start, and serves its invocations.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/create-task
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/ichido/ichido/internal/taskfn"
)

func main() {
	if err := taskfn.Serve(context.Background(), taskfn.CreateTaskFunction, os.Getenv); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("create-task: cannot start", "error", err.Error())
		os.Exit(1)
	}
}
