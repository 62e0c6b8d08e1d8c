package webhook_test

import (
	"os"
	"testing"

	"github.com/ichido/ichido/internal/libtest/storekit"
)

// TestMain stops the servers the tests shared.
func TestMain(m *testing.M) { os.Exit(storekit.Main(m)) }

// adminStore is a store whose records a test can list.
type adminStore = storekit.Store
