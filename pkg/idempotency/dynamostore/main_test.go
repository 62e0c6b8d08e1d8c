package dynamostore_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs the examples that need a server only where the environment
// names one (the SDK's endpoint and credentials, and IDEMPOTENCY_TABLE), as a user's program would read it; the library's
// tests in this repository run them so on its test server. Elsewhere they
// are skipped, and go test says so.
func TestMain(m *testing.M) {
	flag.Parse()
	for _, name := range []string{"IDEMPOTENCY_TABLE", "AWS_REGION"} {
		if os.Getenv(name) == "" {
			fmt.Printf("%s is not set: the examples that need DynamoDB are skipped\n", name)
			skip := "^ExampleNew$"
			if s := flag.Lookup("test.skip").Value.String(); s != "" {
				skip = s + "|" + skip
			}
			_ = flag.Set("test.skip", skip)
			break
		}
	}
	os.Exit(m.Run())
}
