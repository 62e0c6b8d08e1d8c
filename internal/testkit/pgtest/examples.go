package pgtest

import (
	"context"
	"fmt"
	"os"
	"testing"
)

// MainWithDatabaseURL runs a test binary whose Examples read DATABASE_URL
// as a user's program would: it points DATABASE_URL at the shared test
// cluster's database unless it is set, sets each of env that is not set,
// runs the tests and exits. Call it from TestMain.
func MainWithDatabaseURL(m *testing.M, env map[string]string) {
	if os.Getenv("DATABASE_URL") == "" {
		u, err := SharedURL(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("DATABASE_URL", u)
	}
	for name, value := range env {
		if os.Getenv(name) == "" {
			os.Setenv(name, value)
		}
	}
	os.Exit(m.Run())
}
