package storetest_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/memstore"
	"github.com/ichido/ichido/pkg/idempotency/storetest"
)

// A store's package runs the suite in one test function, here
// TestMemStore on the contract part. The example runs it as go test
// would. In a store's own _test.go file it is a plain
// func TestMemStore(t *testing.T), and Parts is left to its default.
func ExampleRun() {
	testMemStore := func(t *testing.T) {
		storetest.Run(t, storetest.Config{
			Parts: storetest.Contract,
			New:   func(*testing.T) idemstore.Store { return memstore.New() },
		})
	}
	all := func(string, string) (bool, error) { return true, nil }
	// With go test -v the suite reports each case on standard output;
	// the example keeps only its verdict.
	stdout := os.Stdout
	os.Stdout, _ = os.Open(os.DevNull)
	passed := testing.RunTests(all, []testing.InternalTest{{Name: "TestMemStore", F: testMemStore}})
	os.Stdout = stdout
	fmt.Println("passed:", passed)
	// Output: passed: true
}
