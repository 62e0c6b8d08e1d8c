package taskfn

import (
	"context"
	"fmt"

	"github.com/aws/aws-lambda-go/lambda"
)

// Serve is the whole of a task function's main: it builds the functions from
// the environment once, at cold start (see Build), and serves the Lambda
// invocations of the one named logicalID until the execution environment
// ends, closing the pool on SIGTERM. It returns only when the function
// cannot start: a setting is missing or wrong (the error matches ErrConfig
// and names the variables), the database cannot be reached, or logicalID is
// not one of LogicalIDs.
func Serve(ctx context.Context, logicalID string, getenv func(string) string) error {
	if !knownFunction(logicalID) {
		return fmt.Errorf("taskfn: no function %q (known: %v)", logicalID, LogicalIDs())
	}
	fns, err := Build(ctx, getenv)
	if err != nil {
		return err
	}
	h, _ := fns.Handler(logicalID)
	lambda.StartWithOptions(h, lambda.WithEnableSIGTERM(fns.Close))
	return nil
}

func knownFunction(logicalID string) bool {
	for _, id := range LogicalIDs() {
		if id == logicalID {
			return true
		}
	}
	return false
}
