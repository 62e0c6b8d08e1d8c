package dbpool_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ichido/ichido/internal/pgtest"
)

// TestMain gives the Examples the environment a local run of a function
// has: DB_AUTH=url and the shared test cluster's DATABASE_URL, unless set.
func TestMain(m *testing.M) {
	if os.Getenv("DATABASE_URL") == "" {
		u, err := pgtest.SharedURL(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("DATABASE_URL", u)
	}
	if os.Getenv("DB_AUTH") == "" {
		os.Setenv("DB_AUTH", "url")
	}
	os.Exit(m.Run())
}
