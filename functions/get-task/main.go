// Command get-task is the GetTaskFunction Lambda function: GET /tasks/{id} of the
// sample task API. It is wiring only: the function is built from the
// environment once, at cold start, by package taskfn.
//
// Build it as SAM does: GOOS=linux GOARCH=arm64 CGO_ENABLED=0
// go build -tags lambda.norpc -o bootstrap ./functions/get-task
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/pkg/taskfn"
)

func main() {
	if err := run(); err != nil {
		slog.New(slog.NewJSONHandler(os.Stderr, nil)).Error("get-task: cannot start", "error", err.Error())
		os.Exit(1)
	}
}

// run builds the function and serves invocations until the execution
// environment ends. It returns only when the function cannot start.
func run() error {
	fns, err := taskfn.Build(context.Background(), os.Getenv)
	if err != nil {
		return err
	}
	h, ok := fns.Handler(taskfn.GetTaskFunction)
	if !ok {
		fns.Close()
		return fmt.Errorf("taskfn has no handler for %s", taskfn.GetTaskFunction)
	}
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(fns.Close))
	return nil
}
