package pgstore_test

import (
	"testing"

	"github.com/ichido/ichido/internal/pgtest"
)

// TestMain gives the Examples the DATABASE_URL a user's program would read:
// the shared test cluster's database unless one is set.
func TestMain(m *testing.M) {
	pgtest.MainWithDatabaseURL(m, nil)
}
