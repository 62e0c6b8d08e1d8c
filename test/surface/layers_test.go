package surface

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// deps lists the packages of this module that p imports, directly or not,
// leaving p itself out.
func deps(t *testing.T, p string) []string {
	t.Helper()
	var out []string
	for _, d := range goList(t, "-deps", p) {
		if d != p && strings.HasPrefix(d, module+"/") {
			out = append(out, d)
		}
	}
	return out
}

// The store contract is a leaf: a store compiles against it alone.
func TestContractImportsNothingOfTheModule(t *testing.T) {
	t.Parallel()
	require.Empty(t, deps(t, module+"/pkg/idempotency/idemstore"), "idemstore must import nothing else of the module")
}

// The stores import the contract, not the user package; pgstore alone may
// import both, for the completion inside the caller's transaction.
func TestStoresImportTheContract(t *testing.T) {
	t.Parallel()
	for _, store := range []string{"redisstore", "dynamostore", "memstore"} {
		p := module + "/pkg/idempotency/" + store
		d := deps(t, p)
		require.Contains(t, d, module+"/pkg/idempotency/idemstore", "%s implements the contract", store)
		require.NotContains(t, d, module+"/pkg/idempotency", "%s imports the user package", store)
	}
}

// The library imports nothing of the repository's own: not the sample app,
// not its tooling. The suite for store authors may use the log capture of
// the test helpers, and nothing else.
func TestLibraryImportsNothingOfTheRepository(t *testing.T) {
	t.Parallel()
	for _, p := range goList(t, "./pkg/...") {
		var outside []string
		for _, d := range deps(t, p) {
			if !strings.HasPrefix(d, module+"/pkg/") {
				outside = append(outside, d)
			}
		}
		if strings.HasSuffix(p, "/storetest") {
			outside = slices.DeleteFunc(outside, func(d string) bool { return d == module+"/internal/capture" })
		}
		require.Empty(t, outside, "%s imports packages of the repository's own", p)
	}
}
