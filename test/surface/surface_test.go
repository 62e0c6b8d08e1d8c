// Package surface checks the rule of ADR 0087 on the module as a user sees
// it: only the library is importable, its API is one import, and every
// entry point a user starts from has an Example that runs as a test.
package surface

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/ichido/ichido"

func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(dir, "go.mod"))
	return dir
}

// goList runs go list in the repository's root with args.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	return goListIn(t, root(t), args...)
}

// goListIn runs go list in dir with args.
func goListIn(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = dir
	out, err := cmd.Output()
	var stderr string
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "go list %v in %s: %s", args, dir, stderr)
	return strings.Fields(string(out))
}

// The repository's modules, by folder: the sample app and its tooling (the
// root), the published ones (the user API, each store client, each
// framework adapter, the operations command) and the two that are never
// tagged (the test helpers and the library's server-backed tests). Each is
// listed in its own folder, so that the lists hold with or without go.work.
var modules = []string{".", "pkg", filepath.Join("pkg", "dbpool"),
	filepath.Join("pkg", "idempotency", "pgstore"), filepath.Join("pkg", "idempotency", "redisstore"),
	filepath.Join("pkg", "idempotency", "dynamostore"), filepath.Join("pkg", "idempotency", "storeenv"),
	filepath.Join("pkg", "idempotency", "grpcidem"), filepath.Join("pkg", "idempotency", "connectidem"),
	filepath.Join("pkg", "idempotency", "ginidem"), filepath.Join("pkg", "idempotency", "echoidem"),
	filepath.Join("pkg", "idempotency", "otelidem"),
	filepath.Join("cmd", "keystore"), filepath.Join("internal", "testkit"), filepath.Join("internal", "libtest")}

// libraryPackages lists the packages of the library's modules (those under
// pkg/).
func libraryPackages(t *testing.T) []string {
	t.Helper()
	var pkgs []string
	for _, dir := range modules {
		if dir == "pkg" || strings.HasPrefix(dir, "pkg"+string(filepath.Separator)) {
			pkgs = append(pkgs, goListIn(t, filepath.Join(root(t), dir), "./...")...)
		}
	}
	return pkgs
}

// The packages another module can import are the library's alone.
func TestOnlyTheLibraryIsImportable(t *testing.T) {
	t.Parallel()
	library := regexp.MustCompile(`^` + regexp.QuoteMeta(module) + `/pkg/(idempotency(/[a-z0-9]+)*|dbpool)$`)
	var importable []string
	for _, dir := range modules {
		for _, p := range goListIn(t, filepath.Join(root(t), dir), "./...") {
			rel := strings.TrimPrefix(p, module)
			if strings.Contains(rel+"/", "/internal/") || strings.HasPrefix(rel, "/functions/") ||
				strings.HasPrefix(rel, "/cmd/") ||
				strings.HasPrefix(rel, "/test/") || rel == "/migrations" {
				continue // internal, or a main, a test-only package or the app's SQL
			}
			importable = append(importable, p)
		}
	}
	require.NotEmpty(t, importable)
	for _, p := range importable {
		require.Regexp(t, library, p, "%s can be imported by another module but is not the library: move it under internal/", p)
	}
	// The library's modules hold the library and its internal packages,
	// nothing else.
	for _, p := range libraryPackages(t) {
		require.Regexp(t, library, p)
	}
}

var internalName = regexp.MustCompile(`\b(apigw|problem|pgtest|redistest|dynamotest|tasks|taskfn|localapi|lambdarie|samtemplate|capture|migrate)\.[A-Z]`)

// No public signature names a type of an internal package: a user could not
// write the value it asks for.
func TestPublicSignaturesNeedNoInternalPackage(t *testing.T) {
	t.Parallel()
	for _, p := range libraryPackages(t) {
		if strings.Contains(p, "/internal/") {
			continue // the library's own machinery: no user sees it
		}
		cmd := exec.Command("go", "doc", "-all", "-short", p)
		cmd.Dir = root(t)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, line := range strings.Split(string(out), "\n") {
			require.NotRegexp(t, internalName, line, "go doc %s shows a name of an internal package", p)
		}
	}
}

// Every entry point a user starts from has an Example attached to it that
// runs (has an Output comment), so go doc and pkg.go.dev show it working.
func TestEntryPointsHaveRunnableExamples(t *testing.T) {
	t.Parallel()
	want := map[string][]string{
		"pkg/idempotency": {"ExampleWrap", "ExampleMiddleware", "ExampleFunction", "ExampleSQSHandler",
			"ExampleSubjectUUID", "ExampleConfig_keyFormat", "ExampleConfig_allowMissingKey", "ExampleBodyKey",
			"ExampleConfig_onReplay", "ExampleConfig_keyPrefix", "ExampleFunctionConfig_options"},
		"pkg/idempotency/pgstore":     {"ExampleNew", "ExampleMigrate"},
		"pkg/idempotency/redisstore":  {"ExampleNew"},
		"pkg/idempotency/dynamostore": {"ExampleNew"},
		"pkg/idempotency/memstore":    {"ExampleNew"},
		"pkg/idempotency/storeenv":    {"ExampleKind"},
		"pkg/dbpool":                  {"ExampleNew"},
	}
	for dir, names := range want {
		runnable := runnableExamples(t, filepath.Join(root(t), dir))
		for _, name := range names {
			require.True(t, runnable[name], "%s has no runnable %s", dir, name)
		}
	}
}

func runnableExamples(t *testing.T, dir string) map[string]bool {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	fset := token.NewFileSet()
	out := map[string]bool{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
		require.NoError(t, err)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Example") || fn.Body == nil {
				continue
			}
			for _, cg := range f.Comments {
				if cg.Pos() > fn.Body.Lbrace && cg.End() < fn.Body.Rbrace && strings.HasPrefix(strings.TrimSpace(cg.Text()), "Output:") {
					out[fn.Name.Name] = true
				}
			}
		}
	}
	return out
}
