package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/ichido/ichido/internal/pgtest"
)

// TestMain gives the Examples the DATABASE_URL a user's program would read:
// the shared test cluster's database unless one is set.
func TestMain(m *testing.M) {
	if os.Getenv("DATABASE_URL") == "" {
		u, err := pgtest.SharedURL(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Setenv("DATABASE_URL", u)
	}
	os.Exit(m.Run())
}
