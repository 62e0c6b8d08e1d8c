package dbpool_test

import (
	"testing"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestMain gives the Examples the environment a local run of a function
// has: DB_AUTH=url and the shared test cluster's DATABASE_URL, unless set.
func TestMain(m *testing.M) {
	pgtest.MainWithDatabaseURL(m, map[string]string{"DB_AUTH": "url"})
}
