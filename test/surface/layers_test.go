package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
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
	for _, p := range libraryPackages(t) {
		var outside []string
		for _, d := range deps(t, p) {
			if !strings.HasPrefix(d, module+"/pkg/") {
				outside = append(outside, d)
			}
		}
		if strings.HasSuffix(p, "/storetest") {
			outside = slices.DeleteFunc(outside, func(d string) bool { return d == module+"/internal/testkit/capture" })
		}
		require.Empty(t, outside, "%s imports packages of the repository's own", p)
	}
}

// exportedNames counts the exported package-level names of the package in
// dir (types, functions, constants and variables; not methods or fields),
// leaving tests out.
func exportedNames(t *testing.T, dir string) int {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	fset := token.NewFileSet()
	n := 0
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					n++
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							n++
						}
					case *ast.ValueSpec:
						for _, name := range s.Names {
							if name.IsExported() {
								n++
							}
						}
					}
				}
			}
		}
	}
	return n
}

// The user package keeps to its budget: what a user reads is short, and
// what only store authors need lives in idemstore.
func TestUserPackageBudget(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root(t), "pkg", "idempotency")
	// 94 when the library was split by audience; since then IssuerSubject
	// (a subject qualified by its issuer) and TenantUserID (a record's user
	// id in a tenant, for operators and for programs keying on it); then
	// Drain (a server's clean shutdown) with ErrShuttingDown and ErrNoTenant
	// (Settings.RequireTenant), the errors a function's caller branches on.
	const budget = 99
	n := exportedNames(t, dir)
	require.LessOrEqual(t, n, budget, "pkg/idempotency exports %d names, over its budget of %d: put what only store authors need in idemstore, and what only this module needs behind internal/", n, budget)
	doc, err := os.ReadFile(filepath.Join(dir, "doc.go"))
	require.NoError(t, err)
	lines := strings.Count(string(doc), "\n")
	require.LessOrEqual(t, lines, 150, "doc.go is %d lines: the package doc is an introduction; the full contract belongs in docs/library.md", lines)
	cmd := exec.Command("go", "doc", "-all", module+"/pkg/idempotency")
	cmd.Dir = root(t)
	out, err := cmd.Output()
	require.NoError(t, err)
	// 900 until Drain, RequireTenant and their errors, whose rules live in
	// docs/servers.md.
	require.LessOrEqual(t, strings.Count(string(out), "\n"), 930, "go doc -all of the user package is over 930 lines: say each rule once, in docs/library.md, and keep the godoc to what each name does")
}

// The README shows code early: its first code block within its first 150
// words, its first wrapped handler within its first 400.
func TestReadmeShowsCodeFirst(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	require.NoError(t, err)
	words := strings.Fields(string(b))
	firstCode, firstWrap := -1, -1
	for i, w := range words {
		if firstCode < 0 && strings.HasPrefix(w, "```") {
			firstCode = i
		}
		if firstWrap < 0 && (strings.Contains(w, "idempotency.Wrap(") || strings.Contains(w, "idempotency.Middleware(")) {
			firstWrap = i
		}
	}
	require.GreaterOrEqual(t, firstCode, 0, "README.md has no code block")
	require.Less(t, firstCode, 150, "README.md's first code block comes after word %d", firstCode)
	require.GreaterOrEqual(t, firstWrap, 0, "README.md wraps no handler")
	require.Less(t, firstWrap, 400, "README.md's first wrapped handler comes after word %d", firstWrap)
}
