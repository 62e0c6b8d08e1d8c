package dbpool_test

import (
	"flag"
	"fmt"
	"os"
	"testing"
)

// TestMain runs the examples that need a server only where the environment
// names one (DB_AUTH=url and DATABASE_URL), as a user's program would read it; the library's
// tests in this repository run them so on its test server. Elsewhere they
// are skipped, and go test says so.
func TestMain(m *testing.M) {
	flag.Parse()
	for _, name := range []string{"DB_AUTH", "DATABASE_URL"} {
		if os.Getenv(name) == "" {
			fmt.Printf("%s is not set: the examples that need a PostgreSQL server are skipped\n", name)
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
