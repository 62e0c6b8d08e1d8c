package grpcidem_test

import (
	"os"
	"testing"

	"github.com/ichido/ichido/internal/libtest/storekit"
)

// TestMain stops the servers the tests shared.
func TestMain(m *testing.M) { os.Exit(storekit.Main(m)) }
