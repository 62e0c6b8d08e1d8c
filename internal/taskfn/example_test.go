package taskfn_test

import (
	"context"
	"log"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/ichido/ichido/internal/taskfn"
)

// A Lambda main builds the functions once, at cold start, and serves one.
func ExampleBuild() {
	fns, err := taskfn.Build(context.Background(), os.Getenv)
	if err != nil {
		log.Fatal(err) // names every variable that is missing or wrong
	}
	h, _ := fns.Handler(taskfn.CreateTaskFunction)
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(fns.Close))
}
