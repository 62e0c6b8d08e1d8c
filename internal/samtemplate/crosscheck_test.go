package samtemplate_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/taskfn"
	"github.com/ichido/ichido/pkg/dbpool"
)

const modulePath = "github.com/ichido/ichido"

// functionDirs maps each logical id to its folder under functions/, as
// mk/functions.mk's FUNCTION_DIRS declares them (LogicalId=folder), so a
// function added there is checked like the others.
func functionDirs(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), "mk", "functions.mk"))
	require.NoError(t, err)
	text := strings.ReplaceAll(string(b), "\\\n", " ")
	m := regexp.MustCompile(`(?m)^FUNCTION_DIRS\s*:?=(.*)$`).FindStringSubmatch(text)
	require.NotNil(t, m, "mk/functions.mk declares no FUNCTION_DIRS")
	dirs := map[string]string{}
	for _, pair := range strings.Fields(m[1]) {
		id, dir, ok := strings.Cut(pair, "=")
		require.True(t, ok, "FUNCTION_DIRS entry %q is not LogicalId=folder", pair)
		dirs[id] = dir
	}
	require.NotEmpty(t, dirs)
	return dirs
}

// agreedEnv lists the variables the code is agreed to read. The scan of the
// code must find each of them, so that a scan that finds nothing fails.
var agreedEnv = []string{
	"DB_AUTH", "DATABASE_URL", "DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "AWS_REGION",
	"DB_MAX_CONNS", "DB_TLS_CA", "DB_CONNECT_TIMEOUT", "DB_QUERY_MODE", "IDEMPOTENCY_STORE", "REDIS_URL", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_SCHEMA", "IDEMPOTENCY_TTL", "LOG_LEVEL",
	"DB_SETUP_MIGRATE_USER", "DB_SETUP_APP_USER",
}

// refusedEnv lists variables the code reads only to refuse a deployed
// configuration that would send a password or weaken TLS: the template must
// not declare them.
var refusedEnv = []string{"PGPASSWORD", "PGPASSFILE", "PGSSLMODE"}

// runtimeProvided reports whether Lambda itself sets the variable. Lambda
// reserves these names: a function may not declare them.
func runtimeProvided(name string) bool {
	switch name {
	case "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_EXECUTION_ENV", "AWS_ACCESS_KEY_ID",
		"AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_XRAY_CONTEXT_MISSING",
		"AWS_XRAY_DAEMON_ADDRESS", "_HANDLER", "_X_AMZN_TRACE_ID", "LAMBDA_TASK_ROOT",
		"LAMBDA_RUNTIME_DIR", "TZ":
		return true
	}
	return strings.HasPrefix(name, "AWS_LAMBDA_")
}

func functionByID(t *testing.T, tpl *samtemplate.Template, id string) samtemplate.Function {
	t.Helper()
	for _, f := range tpl.Functions() {
		if f.LogicalID == id {
			return f
		}
	}
	t.Fatalf("template.yaml has no function %s", id)
	return samtemplate.Function{}
}

// forEachProfile runs check as a parallel subtest on the template resolved
// for each way to deploy (every combination of the profile parameters).
func forEachProfile(t *testing.T, check func(t *testing.T, tpl *samtemplate.Template, profile map[string]string)) {
	t.Helper()
	tpl := projectTemplate(t)
	for _, p := range profiles(t, tpl) {
		resolved, err := tpl.Resolve(p)
		require.NoError(t, err, profileName(p))
		t.Run(profileName(p), func(t *testing.T) {
			t.Parallel()
			check(t, resolved, p)
		})
	}
}

// The template's functions are those of mk/functions.mk, each with its code
// folder.
func TestFunctionsHaveCode(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	functionDirs := functionDirs(t)
	var ids []string
	for _, f := range projectTemplate(t).Functions() {
		ids = append(ids, f.LogicalID)
	}
	want := make([]string, 0, len(functionDirs))
	for id := range functionDirs {
		want = append(want, id)
	}
	sort.Strings(want)
	require.Equal(t, want, ids, "template.yaml's functions")

	entries, err := os.ReadDir(filepath.Join(root, "functions"))
	require.NoError(t, err, "the functions/ folder")
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			dirs = append(dirs, e.Name())
		}
	}
	var wantDirs []string
	for _, d := range functionDirs {
		wantDirs = append(wantDirs, d)
		_, err := os.Stat(filepath.Join(root, "functions", d, "main.go"))
		require.NoError(t, err, "functions/%s/main.go", d)
	}
	sort.Strings(wantDirs)
	require.Equal(t, wantDirs, dirs, "every folder under functions/ is a function of the template")
}

// Every function is built by its build-<LogicalId> target as a static
// linux/arm64 bootstrap, as SAM's makefile build method expects.
func TestFunctionsBuildForLambda(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	functionDirs := functionDirs(t)
	for _, f := range projectTemplate(t).Functions() {
		t.Run(f.LogicalID, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, ".", f.CodeURI, "CodeUri")
			require.Equal(t, "makefile", f.BuildMethod, "Metadata.BuildMethod")
			require.Equal(t, "provided.al2023", f.Runtime, "Runtime")
			require.Equal(t, "bootstrap", f.Handler, "Handler")
			require.Equal(t, []string{"arm64"}, f.Architectures, "Architectures")

			artifacts := t.TempDir()
			cmd := exec.Command("make", "--no-print-directory", "-n", "build-"+f.LogicalID, "ARTIFACTS_DIR="+artifacts)
			cmd.Dir = root
			// Settings in the caller's environment must not change what
			// SAM gets.
			cmd.Env = append(os.Environ(), "GOOS=", "GOARCH=", "CGO_ENABLED=", "LAMBDA_GOARCH=")
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "make -n build-%s: %s", f.LogicalID, out)

			var build string
			for _, line := range strings.Split(string(out), "\n") {
				if strings.Contains(line, " build ") && strings.Contains(line, "bootstrap") {
					build = line
				}
			}
			require.NotEmpty(t, build, "make -n build-%s prints no go build of bootstrap:\n%s", f.LogicalID, out)
			fields := strings.Fields(build)
			for _, want := range []string{"GOOS=linux", "GOARCH=arm64", "CGO_ENABLED=0", "-trimpath"} {
				require.Contains(t, fields, want, build)
			}
			require.Regexp(t, `-tags[ =]lambda\.norpc\b`, build)
			require.Contains(t, build, "-o "+artifacts+"/bootstrap ")
			require.True(t, strings.HasSuffix(build, " ./functions/"+functionDirs[f.LogicalID]), build)
		})
	}
}

// Each routed function's main wires the handler of its own logical id, and
// every logical id that taskfn.Handler serves has a route.
func TestRoutesHaveHandlers(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	functionDirs := functionDirs(t)
	tpl := projectTemplate(t)
	routed := map[string]bool{}
	for _, r := range tpl.Routes() {
		routed[r.Function] = true
		dir, ok := functionDirs[r.Function]
		require.True(t, ok, "route %s %s names %s, which is not a function", r.Method, r.Path, r.Function)
		ids := identifiersIn(t, filepath.Join(root, "functions", dir, "main.go"))
		require.True(t, ids[r.Function], "functions/%s/main.go does not mention %s: it must serve that function's handler", dir, r.Function)
	}
	require.False(t, routed[taskfn.MigrateFunction], "MigrateFunction must not be behind the API")

	// The logical ids that taskfn declares (constants whose value ends in
	// "Function") are functions of the template.
	var declared []string
	for _, c := range stringConsts(t, filepath.Join(root, "internal", "taskfn")) {
		if strings.HasSuffix(c, "Function") {
			declared = append(declared, c)
		}
	}
	require.NotEmpty(t, declared, "internal/taskfn declares no logical ids")
	for _, id := range declared {
		_, ok := functionDirs[id]
		require.True(t, ok, "internal/taskfn declares %s, which template.yaml does not declare", id)
	}
	// Those with an API handler have a route, and only they do.
	served := map[string]bool{}
	for _, id := range taskfn.LogicalIDs() {
		served[id] = true
		require.True(t, routed[id], "taskfn serves %s, which has no route", id)
	}
	for id := range routed {
		require.True(t, served[id], "%s has a route, but taskfn.Handler does not serve it", id)
	}
}

// identifiersIn returns the identifiers and string literals of a Go file.
func identifiersIn(t *testing.T, path string) map[string]bool {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	require.NoError(t, err)
	ids := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.Ident:
			ids[x.Name] = true
		case *ast.BasicLit:
			if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING {
				ids[s] = true
			}
		}
		return true
	})
	return ids
}

// stringConsts returns the values of the string constants of a package.
func stringConsts(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, c := range parsePackageConsts(t, dir) {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

func parsePackageConsts(t *testing.T, dir string) map[string]string {
	t.Helper()
	files := parseGoFiles(t, dir)
	consts := map[string]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				vs := s.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if i < len(vs.Values) {
						if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
							v, _ := strconv.Unquote(lit.Value)
							consts[name.Name] = v
						}
					}
				}
			}
		}
	}
	return consts
}

func parseGoFiles(t *testing.T, dir string) []*ast.File {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var files []*ast.File
	fset := token.NewFileSet()
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, 0)
		require.NoError(t, err)
		files = append(files, f)
	}
	return files
}

// goPackages lists, once, the module's packages that each function's main
// depends on, and the folder of every module package.
var (
	depsOnce sync.Once
	fnDeps   map[string][]string // function import path -> the repository's deps (and itself)
	pkgDirs  map[string]string   // import path -> folder, for the functions and their deps
	depsErr  error
)

func functionDeps(t *testing.T) (map[string][]string, map[string]string) {
	t.Helper()
	root := moduleRoot(t)
	depsOnce.Do(func() {
		goList := func(args ...string) ([]byte, error) {
			cmd := exec.Command("go", append([]string{"list"}, args...)...)
			cmd.Dir = root
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(args, " "), err, stderr.Bytes())
			}
			return out, nil
		}
		// The functions and every package they import, with its folder:
		// the library's packages are in a module of their own (pkg/), which
		// ./... of this module does not cover.
		out, err := goList("-deps", "-f", "{{.ImportPath}} {{.Dir}}", "./functions/...")
		if err != nil {
			depsErr = err
			return
		}
		pkgDirs = map[string]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			path, dir, _ := strings.Cut(line, " ")
			pkgDirs[path] = dir
		}
		out, err = goList("-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}", "./functions/...")
		if err != nil {
			depsErr = err
			return
		}
		fnDeps = map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			fields := strings.Fields(line)
			deps := []string{fields[0]}
			for _, d := range fields[1:] {
				if strings.HasPrefix(d, modulePath+"/") {
					deps = append(deps, d)
				}
			}
			fnDeps[fields[0]] = deps
		}
	})
	require.NoError(t, depsErr)
	return fnDeps, pkgDirs
}

// envReads scans the non-test Go files of the given folders for the names
// of the environment variables they read: the string literal, constant, or
// range over a list of literals given to a function whose name ends in "env"
// (os.Getenv, os.LookupEnv, a getenv func parameter, a local env helper).
func envReads(t *testing.T, dirs []string) map[string]bool {
	t.Helper()
	// Constants of every scanned package, by bare name and by pkg.Name.
	consts := map[string]string{}
	type parsed struct {
		pkgName string
		files   []*ast.File
	}
	var pkgs []parsed
	for _, dir := range dirs {
		files := parseGoFiles(t, dir)
		if len(files) == 0 {
			continue
		}
		name := files[0].Name.Name
		for k, v := range parsePackageConsts(t, dir) {
			consts[name+"."+k] = v
		}
		pkgs = append(pkgs, parsed{name, files})
	}
	found := map[string]bool{}
	for _, p := range pkgs {
		resolve := func(e ast.Expr, ranges map[string][]string) []string {
			switch x := e.(type) {
			case *ast.BasicLit:
				if s, err := strconv.Unquote(x.Value); err == nil && x.Kind == token.STRING {
					return []string{s}
				}
			case *ast.Ident:
				if v, ok := consts[p.pkgName+"."+x.Name]; ok {
					return []string{v}
				}
				return ranges[x.Name]
			case *ast.SelectorExpr:
				if pkg, ok := x.X.(*ast.Ident); ok {
					if v, ok := consts[pkg.Name+"."+x.Sel.Name]; ok {
						return []string{v}
					}
				}
			}
			return nil
		}
		for _, f := range p.files {
			// Range variables over literal lists, by name, per file.
			ranges := map[string][]string{}
			ast.Inspect(f, func(n ast.Node) bool {
				rs, ok := n.(*ast.RangeStmt)
				if !ok {
					return true
				}
				v, ok := rs.Value.(*ast.Ident)
				lit, ok2 := rs.X.(*ast.CompositeLit)
				if !ok || !ok2 {
					return true
				}
				for _, elt := range lit.Elts {
					if bl, ok := elt.(*ast.BasicLit); ok && bl.Kind == token.STRING {
						s, _ := strconv.Unquote(bl.Value)
						ranges[v.Name] = append(ranges[v.Name], s)
					}
				}
				return true
			})
			ast.Inspect(f, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				var name string
				switch fn := call.Fun.(type) {
				case *ast.Ident:
					name = fn.Name
				case *ast.SelectorExpr:
					name = fn.Sel.Name
				}
				lower := strings.ToLower(name)
				if !strings.HasSuffix(lower, "env") || strings.HasPrefix(lower, "set") || strings.HasPrefix(lower, "unset") {
					return true
				}
				for _, v := range resolve(call.Args[0], ranges) {
					if envName.MatchString(v) {
						found[v] = true
					}
				}
				return true
			})
		}
	}
	return found
}

var envName = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)

// Every environment variable that a function's code reads is declared for
// that function in the template, or set by Lambda itself.
func TestEnvironmentCoversWhatTheCodeReads(t *testing.T) {
	t.Parallel()
	deps, dirs := functionDeps(t)
	reads := map[string]map[string]bool{}
	all := map[string]bool{}
	for id, dir := range functionDirs(t) {
		path := modulePath + "/functions/" + dir
		pkgs, ok := deps[path]
		require.True(t, ok, "go list does not know %s", path)
		var folders []string
		for _, p := range pkgs {
			folders = append(folders, dirs[p])
		}
		reads[id] = envReads(t, folders)
		for name := range reads[id] {
			all[name] = true
		}
	}
	for _, name := range agreedEnv {
		require.True(t, all[name], "the scan of the functions' code did not find %s: the code or the scan changed", name)
	}
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, _ map[string]string) {
		for id, names := range reads {
			fn := functionByID(t, tpl, id)
			for name := range names {
				if runtimeProvided(name) || slices.Contains(refusedEnv, name) {
					continue
				}
				_, declared := fn.Environment[name]
				require.True(t, declared, "%s reads %s, which template.yaml does not declare for it", id, name)
			}
		}
	})
}

// Lambda refuses reserved names; the refused ones must stay unset.
func TestEnvironmentDeclaresNoReservedOrRefusedNames(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, _ map[string]string) {
		for _, fn := range tpl.Functions() {
			for name := range fn.Environment {
				require.False(t, runtimeProvided(name), "%s declares %s, which Lambda sets itself", fn.LogicalID, name)
				require.NotContains(t, refusedEnv, name, fn.LogicalID)
			}
			require.Equal(t, "iam", fn.Environment["DB_AUTH"], fn.LogicalID)
			require.Empty(t, fn.Environment["DATABASE_URL"], "%s: DATABASE_URL must stay empty when deployed", fn.LogicalID)
		}
	})
}

// getAtt returns the resource and attribute of a long-form Fn::GetAtt.
func getAtt(v any) (string, string) {
	m, _ := v.(map[string]any)
	list, _ := m["Fn::GetAtt"].([]any)
	if len(list) != 2 {
		return "", ""
	}
	r, _ := list[0].(string)
	a, _ := list[1].(string)
	return r, a
}

func ref(v any) string {
	m, _ := v.(map[string]any)
	if len(m) != 1 {
		return ""
	}
	s, _ := m["Ref"].(string)
	return s
}

// The functions reach the writer as the database user their DB_USER names,
// over TLS checked against the CAs their DB_TLS_CA names, and their IAM
// policy allows exactly that: rds-db:connect on dbuser:<id>/<that user> (and,
// for MigrateFunction, its migrate user too; PurgeCheckFunction connects as
// the check user only). With Stage=prod they go
// through the proxy (<id> is its prx- id), which requires TLS and logs in to
// the cluster with IAM itself (end-to-end IAM: no secret); with Stage=dev
// they go straight to the cluster's writer endpoint (<id> is its resource
// id). No user has a password: the master user is an IAM user, and the
// template holds no secret at all.
func TestDatabaseAccessIsConsistent(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		clusters := tpl.ResourceIDs("AWS::RDS::DBCluster")
		require.Len(t, clusters, 1)
		clusterID := clusters[0]
		cluster := tpl.Resources[clusterID].Properties
		proxies := tpl.ResourceIDs("AWS::RDS::DBProxy")
		require.Equal(t, true, cluster["EnableIAMDatabaseAuthentication"], "IAM database authentication, with either stage")
		require.Equal(t, "iam-db-auth", cluster["MasterUserAuthenticationType"], "the master user logs in with IAM")
		require.NotContains(t, cluster, "MasterUserPassword")
		require.NotContains(t, cluster, "ManageMasterUserPassword")
		require.Equal(t, false, cluster["EnableHttpEndpoint"], "the Data API needs a password login, which no user has")
		require.Empty(t, tpl.ResourceIDs("AWS::SecretsManager::Secret"), "no secret: no user has a password")
		require.Equal(t, "DatabaseMasterUser", ref(cluster["MasterUsername"]))

		var (
			host       [2]string // the GetAtt DB_HOST must be
			ca         string    // the DB_TLS_CA it must be
			mode       dbpool.QueryMode
			idOf       [2]string // the GetAtt the rds-db:connect id comes from
			idSelected bool      // the id is the last field of that attribute
		)
		if p["Stage"] == "dev" {
			require.Empty(t, proxies, "Stage=dev deploys no RDS Proxy")
			host, ca, idOf = [2]string{clusterID, "Endpoint.Address"}, dbpool.CARDS, [2]string{clusterID, "DBClusterResourceId"}
			mode = dbpool.QueryModePrepared // a direct connection keeps its statements
		} else {
			require.Len(t, proxies, 1)
			proxyID := proxies[0]
			checkProxy(t, tpl, proxyID, clusterID)
			host, ca, idOf, idSelected = [2]string{proxyID, "Endpoint"}, dbpool.CASystem, [2]string{proxyID, "DBProxyArn"}, true
			mode = dbpool.QueryModeExec // nothing named outlives a statement behind the proxy
		}

		arnPattern := regexp.MustCompile(`^arn:\$\{AWS::Partition\}:rds-db:\$\{AWS::Region\}:\$\{AWS::AccountId\}:dbuser:\$\{(\w+)\}/\$\{(\w+)\}$`)
		for _, fn := range tpl.Functions() {
			user := ref(fn.EnvironmentRaw["DB_USER"])
			require.NotEmpty(t, user, "%s: DB_USER must be a !Ref to a parameter", fn.LogicalID)
			require.Contains(t, tpl.Section("Parameters"), user, fn.LogicalID)
			wantUsers := []string{user}
			if fn.LogicalID == "MigrateFunction" {
				require.Equal(t, "DatabaseMasterUser", user, "the setup connects as the master user first")
				require.Equal(t, "DatabaseMigrateUser", ref(fn.EnvironmentRaw["DB_SETUP_MIGRATE_USER"]))
				require.Equal(t, "DatabaseAppUser", ref(fn.EnvironmentRaw["DB_SETUP_APP_USER"]))
				require.Equal(t, "DatabaseCheckUser", ref(fn.EnvironmentRaw["DB_SETUP_CHECK_USER"]))
				wantUsers = append(wantUsers, "DatabaseMigrateUser")
			} else if fn.LogicalID == "PurgeCheckFunction" {
				require.Equal(t, "DatabaseCheckUser", user, "the purge check connects as the check user")
			} else {
				require.Equal(t, "DatabaseAppUser", user, "%s: the task functions connect as the app user", fn.LogicalID)
			}
			r, a := getAtt(fn.EnvironmentRaw["DB_HOST"])
			require.Equal(t, host, [2]string{r, a}, "%s: DB_HOST", fn.LogicalID)
			require.Equal(t, "5432", fn.Environment["DB_PORT"], fn.LogicalID)
			require.Equal(t, ca, fn.Environment["DB_TLS_CA"], "%s: DB_TLS_CA", fn.LogicalID)
			require.Equal(t, string(mode), fn.Environment["DB_QUERY_MODE"], "%s: DB_QUERY_MODE", fn.LogicalID)

			var connects []any
			for _, stmt := range policyStatements(t, tpl, fn) {
				if stmt["Action"] == "rds-db:connect" || slices.Contains(anySlice(stmt["Action"]), any("rds-db:connect")) {
					connects = append(connects, stmt["Resource"])
				}
			}
			require.Len(t, connects, len(wantUsers), "%s: one rds-db:connect resource per database user", fn.LogicalID)
			var gotUsers []string
			for _, c := range connects {
				sub, _ := c.(map[string]any)["Fn::Sub"].([]any)
				require.Len(t, sub, 2, "%s: rds-db:connect resource must be a !Sub [pattern, vars]", fn.LogicalID)
				m := arnPattern.FindStringSubmatch(str(sub[0]))
				require.NotNil(t, m, "%s: rds-db:connect resource %q", fn.LogicalID, sub[0])
				gotUsers = append(gotUsers, m[2])
				id := sub[1].(map[string]any)[m[1]]
				if idSelected {
					sel, _ := id.(map[string]any)["Fn::Select"].([]any)
					require.Len(t, sel, 2, "%s: the prx- id must be !Select [6, !Split [\":\", !GetAtt Proxy.DBProxyArn]]", fn.LogicalID)
					require.EqualValues(t, 6, sel[0])
					split, _ := sel[1].(map[string]any)["Fn::Split"].([]any)
					require.Len(t, split, 2)
					require.Equal(t, ":", split[0])
					id = split[1]
				}
				r, a = getAtt(id)
				require.Equal(t, idOf, [2]string{r, a}, "%s: the id in rds-db:connect", fn.LogicalID)
			}
			require.ElementsMatch(t, wantUsers, gotUsers, "%s: rds-db:connect names exactly its database users", fn.LogicalID)
		}
	})
}

// checkProxy checks the proxy: TLS required, end-to-end IAM (no Auth list,
// no secret), its own role allowed rds-db:connect on the cluster as exactly
// the four database users, and only RDS acting for this account may
// assume that role.
func checkProxy(t *testing.T, tpl *samtemplate.Template, proxyID, clusterID string) {
	t.Helper()
	proxy := tpl.Resources[proxyID].Properties
	require.Equal(t, true, proxy["RequireTLS"], "RequireTLS")
	require.Equal(t, "POSTGRESQL", proxy["EngineFamily"])
	require.Equal(t, "IAM_AUTH", proxy["DefaultAuthScheme"], "end-to-end IAM authentication")
	require.NotContains(t, proxy, "Auth", "no secret-based login")
	role, _ := getAtt(proxy["RoleArn"])
	require.Equal(t, "AWS::IAM::Role", tpl.Resources[role].Type, "the proxy's own role")

	var users []string
	policies, _ := tpl.Resources[role].Properties["Policies"].([]any)
	for _, p := range policies {
		doc, _ := p.(map[string]any)["PolicyDocument"].(map[string]any)
		for _, st := range anySlice(doc["Statement"]) {
			stmt, _ := st.(map[string]any)
			require.Equal(t, "rds-db:connect", stmt["Action"], "the proxy role's only permission")
			for _, r := range anySlice(stmt["Resource"]) {
				sub := str(r.(map[string]any)["Fn::Sub"])
				m := regexp.MustCompile(`^arn:\$\{AWS::Partition\}:rds-db:\$\{AWS::Region\}:\$\{AWS::AccountId\}:dbuser:\$\{` + clusterID + `\.DBClusterResourceId\}/\$\{(\w+)\}$`).FindStringSubmatch(sub)
				require.NotNil(t, m, "the proxy role connects to this cluster: %q", sub)
				users = append(users, m[1])
			}
		}
	}
	require.ElementsMatch(t, []string{"DatabaseAppUser", "DatabaseMigrateUser", "DatabaseMasterUser", "DatabaseCheckUser"}, users, "the proxy logs in as exactly the four users")
	trust, _ := tpl.Resources[role].Properties["AssumeRolePolicyDocument"].(map[string]any)
	for _, st := range anySlice(trust["Statement"]) {
		stmt, _ := st.(map[string]any)
		require.Equal(t, map[string]any{"Service": "rds.amazonaws.com"}, stmt["Principal"])
		cond, _ := stmt["Condition"].(map[string]any)
		eq, _ := cond["StringEquals"].(map[string]any)
		require.Equal(t, map[string]any{"Ref": "AWS::AccountId"}, eq["aws:SourceAccount"], "the proxy role's trust names this account")
	}
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// policyStatements returns the statements of a function's Policies: inline
// documents and !Ref'd AWS::IAM::ManagedPolicy resources.
func policyStatements(t *testing.T, tpl *samtemplate.Template, fn samtemplate.Function) []map[string]any {
	t.Helper()
	var out []map[string]any
	addDoc := func(doc any) {
		d, _ := doc.(map[string]any)
		switch s := d["Statement"].(type) {
		case []any:
			for _, x := range s {
				m, _ := x.(map[string]any)
				out = append(out, m)
			}
		case map[string]any:
			out = append(out, s)
		}
	}
	policies, _ := fn.Policies.([]any)
	for _, p := range policies {
		if id := ref(p); id != "" {
			r, ok := tpl.Resources[id]
			require.True(t, ok, "%s: policy %s is not a resource of the template", fn.LogicalID, id)
			require.Equal(t, "AWS::IAM::ManagedPolicy", r.Type)
			addDoc(r.Properties["PolicyDocument"])
			continue
		}
		addDoc(p)
	}
	return out
}

// The cluster's parameter group preloads pg_cron and points it at the
// database the functions use.
func TestClusterPreloadsPgCron(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, _ map[string]string) {
		clusters := tpl.ResourceIDs("AWS::RDS::DBCluster")
		require.Len(t, clusters, 1)
		cluster := tpl.Resources[clusters[0]].Properties
		require.Equal(t, "aurora-postgresql", cluster["Engine"])
		pg := tpl.Resources[ref(cluster["DBClusterParameterGroupName"])]
		require.Equal(t, "AWS::RDS::DBClusterParameterGroup", pg.Type, "the cluster's DBClusterParameterGroupName")
		params, _ := pg.Properties["Parameters"].(map[string]any)
		libs := strings.Split(str(params["shared_preload_libraries"]), ",")
		for i := range libs {
			libs[i] = strings.TrimSpace(libs[i])
		}
		require.Contains(t, libs, "pg_cron", "shared_preload_libraries")
		require.Contains(t, libs, "pg_stat_statements", "shared_preload_libraries keeps the family's default")

		dbName := ref(cluster["DatabaseName"])
		require.NotEmpty(t, dbName, "the cluster's DatabaseName must be a !Ref to a parameter")
		require.Equal(t, dbName, ref(params["cron.database_name"]), "cron.database_name must be the app database")
		for _, fn := range tpl.Functions() {
			require.Equal(t, dbName, ref(fn.EnvironmentRaw["DB_NAME"]), "%s: DB_NAME", fn.LogicalID)
		}

		// The family follows the engine version's major.
		version, _ := tpl.Section("Parameters")[ref(cluster["EngineVersion"])].(map[string]any)
		major, _, _ := strings.Cut(str(version["Default"]), ".")
		require.Equal(t, "aurora-postgresql"+major, pg.Properties["Family"])
	})
}

// Stage chooses the shape: prod keeps the cluster at MinCapacity or more
// behind RDS Proxy; dev lets it scale to 0 ACU and pause, on an engine
// version that can (16.3 or later), which AWS documents as unavailable with
// RDS Proxy. Either way the functions give up connecting well before their
// timeout, and the proxy gives up borrowing a connection before that too.
func TestStageProfiles(t *testing.T) {
	t.Parallel()
	param, _ := projectTemplate(t).Section("Parameters")["Stage"].(map[string]any)
	require.Equal(t, "prod", param["Default"], "the default is the mission's shape")
	require.ElementsMatch(t, []any{"prod", "dev"}, param["AllowedValues"])
	maxCap, _ := projectTemplate(t).Section("Parameters")["MaxCapacity"].(map[string]any)
	require.NotEmpty(t, maxCap["AllowedValues"], "MaxCapacity is bounded")
	for _, v := range anySlice(maxCap["AllowedValues"]) {
		f, err := strconv.ParseFloat(fmt.Sprint(v), 64)
		require.NoError(t, err)
		require.LessOrEqual(t, f, 16.0, "MaxCapacity at most 16")
	}

	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		cluster := tpl.Resources[tpl.ResourceIDs("AWS::RDS::DBCluster")[0]]
		scaling, _ := cluster.Properties["ServerlessV2ScalingConfiguration"].(map[string]any)
		version, _ := tpl.Section("Parameters")[ref(cluster.Properties["EngineVersion"])].(map[string]any)
		if p["Stage"] == "dev" {
			require.EqualValues(t, 0, scaling["MinCapacity"], "dev scales to 0 ACU")
			require.Equal(t, "SecondsUntilAutoPause", ref(scaling["SecondsUntilAutoPause"]))
			var major, minor int
			_, err := fmt.Sscanf(str(version["Default"]), "%d.%d", &major, &minor)
			require.NoError(t, err)
			require.True(t, major > 16 || (major == 16 && minor >= 3), "auto-pause needs Aurora PostgreSQL 16.3 or later, not %s", version["Default"])
			// The functions reach the cluster directly, and nothing else.
			requireRule(t, tpl, "AWS::EC2::SecurityGroupEgress", "FunctionSecurityGroup", "DatabaseSecurityGroup", 5432)
			requireRule(t, tpl, "AWS::EC2::SecurityGroupIngress", "DatabaseSecurityGroup", "FunctionSecurityGroup", 5432)
		} else {
			require.Equal(t, "MinCapacity", ref(scaling["MinCapacity"]))
			require.NotContains(t, scaling, "SecondsUntilAutoPause")
			requireRule(t, tpl, "AWS::EC2::SecurityGroupEgress", "FunctionSecurityGroup", "ProxySecurityGroup", 5432)
			requireRule(t, tpl, "AWS::EC2::SecurityGroupIngress", "DatabaseSecurityGroup", "ProxySecurityGroup", 5432)
			for _, id := range tpl.ResourceIDs("AWS::EC2::SecurityGroupIngress") {
				r := tpl.Resources[id].Properties
				require.False(t, ref(r["GroupId"]) == "DatabaseSecurityGroup" && ref(r["SourceSecurityGroupId"]) == "FunctionSecurityGroup",
					"with the proxy, the functions do not reach the database directly (%s)", id)
			}
			tg := tpl.Resources[tpl.ResourceIDs("AWS::RDS::DBProxyTargetGroup")[0]].Properties
			pool, _ := tg["ConnectionPoolConfigurationInfo"].(map[string]any)
			borrow, ok := pool["ConnectionBorrowTimeout"].(int64)
			require.True(t, ok, "ConnectionBorrowTimeout is a number of seconds")
			for _, fn := range tpl.Functions() {
				require.Less(t, time.Duration(borrow)*time.Second, functionTimeout(t, tpl, fn), "%s: ConnectionBorrowTimeout", fn.LogicalID)
			}
		}
		for _, fn := range tpl.Functions() {
			d, err := time.ParseDuration(fn.Environment["DB_CONNECT_TIMEOUT"])
			require.NoError(t, err, "%s: DB_CONNECT_TIMEOUT", fn.LogicalID)
			env := fn.Environment
			env["AWS_REGION"] = "eu-west-1"
			env["DB_HOST"], env["DB_NAME"], env["DB_USER"] = "db.example", "ichido", "ichido_app"
			cfg, err := dbpool.ConfigFromEnv(func(k string) string { return env[k] })
			require.NoError(t, err, "%s: package dbpool accepts the template's settings", fn.LogicalID)
			require.Equal(t, d, cfg.ConnectTimeout)
			require.LessOrEqual(t, 2*d, functionTimeout(t, tpl, fn), "%s: DB_CONNECT_TIMEOUT must leave time to answer 503", fn.LogicalID)
		}
	})
}

// requireRule fails unless a security group rule of typ on group names peer
// for port.
func requireRule(t *testing.T, tpl *samtemplate.Template, typ, group, peer string, port int64) {
	t.Helper()
	key := "DestinationSecurityGroupId"
	if typ == "AWS::EC2::SecurityGroupIngress" {
		key = "SourceSecurityGroupId"
	}
	for _, id := range tpl.ResourceIDs(typ) {
		r := tpl.Resources[id].Properties
		if ref(r["GroupId"]) == group && ref(r[key]) == peer && r["FromPort"] == port && r["ToPort"] == port {
			return
		}
	}
	t.Fatalf("no %s on %s for %s port %d", typ, group, peer, port)
}

// functionTimeout returns a function's Timeout (its own, else Globals').
func functionTimeout(t *testing.T, tpl *samtemplate.Template, fn samtemplate.Function) time.Duration {
	t.Helper()
	v, ok := tpl.Resources[fn.LogicalID].Properties["Timeout"].(int64)
	if !ok {
		g, _ := tpl.Section("Globals")["Function"].(map[string]any)
		v, ok = g["Timeout"].(int64)
	}
	require.True(t, ok, "%s has no Timeout", fn.LogicalID)
	return time.Duration(v) * time.Second
}

// What an operator needs: every function and the API log to a group with a
// retention, every route is throttled, deletion protection covers the
// cluster and the user pool.
func TestOperations(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, _ map[string]string) {
		retained := func(what string, v any) {
			t.Helper()
			id := ref(v)
			if id == "" {
				r, _ := getAtt(v)
				id = r
			}
			lg, ok := tpl.Resources[id]
			require.True(t, ok, "%s: log group %v", what, v)
			require.Equal(t, "AWS::Logs::LogGroup", lg.Type, what)
			require.Equal(t, "LogRetentionInDays", ref(lg.Properties["RetentionInDays"]), "%s: retention", what)
		}
		for _, fn := range tpl.Functions() {
			lc, _ := tpl.Resources[fn.LogicalID].Properties["LoggingConfig"].(map[string]any)
			retained(fn.LogicalID, lc["LogGroup"])
		}
		apis := tpl.ResourceIDs("AWS::Serverless::HttpApi")
		require.Len(t, apis, 1)
		api := tpl.Resources[apis[0]].Properties
		logs, _ := api["AccessLogSettings"].(map[string]any)
		retained("HttpApi access logs", logs["DestinationArn"])
		require.Contains(t, str(logs["Format"]), "$context.requestId")
		throttle, _ := api["DefaultRouteSettings"].(map[string]any)
		require.Equal(t, "ApiThrottlingRateLimit", ref(throttle["ThrottlingRateLimit"]))
		require.Equal(t, "ApiThrottlingBurstLimit", ref(throttle["ThrottlingBurstLimit"]))

		cluster := tpl.Resources[tpl.ResourceIDs("AWS::RDS::DBCluster")[0]]
		require.Equal(t, true, cluster.Properties["DeletionProtection"])
		require.Equal(t, "Snapshot", cluster.Raw["DeletionPolicy"])
		pool := tpl.Resources[tpl.ResourceIDs("AWS::Cognito::UserPool")[0]]
		require.Equal(t, "ACTIVE", pool.Properties["DeletionProtection"])
	})
	off, err := projectTemplate(t).Resolve(map[string]string{"DeletionProtection": "false"})
	require.NoError(t, err)
	require.Equal(t, false, off.Resources[off.ResourceIDs("AWS::RDS::DBCluster")[0]].Properties["DeletionProtection"])
	require.Equal(t, "INACTIVE", off.Resources[off.ResourceIDs("AWS::Cognito::UserPool")[0]].Properties["DeletionProtection"])
}

// The Valkey cache exists only when IdempotencyStore=redis, and then the
// functions are told to use it.
func TestRedisIsOptional(t *testing.T) {
	t.Parallel()
	param, _ := projectTemplate(t).Section("Parameters")["IdempotencyStore"].(map[string]any)
	require.Equal(t, "postgres", param["Default"])
	require.ElementsMatch(t, []any{"postgres", "redis", "dynamodb"}, param["AllowedValues"])
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		caches := tpl.ResourceIDs("AWS::ElastiCache::ServerlessCache")
		if p["IdempotencyStore"] != "redis" {
			require.Empty(t, caches)
			for _, typ := range []string{"AWS::EC2::SecurityGroupIngress", "AWS::EC2::SecurityGroupEgress"} {
				for _, id := range tpl.ResourceIDs(typ) {
					require.NotEqualValues(t, 6379, tpl.Resources[id].Properties["FromPort"], "%s: no path to a cache", id)
				}
			}
			for _, fn := range tpl.Functions() {
				require.Equal(t, p["IdempotencyStore"], fn.Environment["IDEMPOTENCY_STORE"], fn.LogicalID)
				require.Equal(t, "", fn.EnvironmentRaw["REDIS_URL"], fn.LogicalID)
			}
			return
		}
		require.Len(t, caches, 1)
		require.Equal(t, "valkey", tpl.Resources[caches[0]].Properties["Engine"])
		sg := ref(anySlice(tpl.Resources[caches[0]].Properties["SecurityGroupIds"])[0])
		requireRule(t, tpl, "AWS::EC2::SecurityGroupIngress", sg, "FunctionSecurityGroup", 6379)
		requireRule(t, tpl, "AWS::EC2::SecurityGroupEgress", "FunctionSecurityGroup", sg, 6379)
		for _, fn := range tpl.Functions() {
			require.Equal(t, "redis", fn.Environment["IDEMPOTENCY_STORE"], fn.LogicalID)
			require.Equal(t, map[string]any{"Fn::Sub": "rediss://${" + caches[0] + ".Endpoint.Address}:${" + caches[0] + ".Endpoint.Port}"},
				fn.EnvironmentRaw["REDIS_URL"], fn.LogicalID)
		}
	})
}

// The outputs a deploy's user needs.
func TestOutputs(t *testing.T) {
	t.Parallel()
	forEachProfile(t, func(t *testing.T, tpl *samtemplate.Template, p map[string]string) {
		outputs := tpl.Section("Outputs")
		want := []string{"ApiUrl", "ClusterEndpoint", "UserPoolId", "UserPoolClientId", "MigrateFunctionName", "ClusterArn",
			"DatabaseVersion", "TaskEventsQueueUrl", "TaskEventsDeadLetterQueueUrl"}
		if p["Stage"] != "dev" {
			want = append(want, "ProxyEndpoint")
		}
		for _, name := range want {
			require.Contains(t, outputs, name)
		}
	})
}

// samconfig.toml configures the commands the project's users type.
func TestSamconfig(t *testing.T) {
	t.Parallel()
	f, err := os.Open(filepath.Join(moduleRoot(t), "samconfig.toml"))
	require.NoError(t, err)
	defer f.Close()
	sections := map[string]map[string]string{}
	var current string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.HasPrefix(line, "[") {
			current = strings.Trim(line, "[]")
			sections[current] = map[string]string{}
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, "samconfig.toml: %q", line)
		if current != "" {
			sections[current][strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	require.NoError(t, sc.Err())
	require.Equal(t, "true", sections["default.build.parameters"]["build_in_source"])
	require.Contains(t, sections["default.deploy.parameters"]["capabilities"], "CAPABILITY_IAM")
	require.Equal(t, "env.json", sections["default.local_invoke.parameters"]["env_vars"])
	require.Equal(t, "env.json", sections["default.local_start_api.parameters"]["env_vars"])
	require.Equal(t, "3000", sections["default.local_start_api.parameters"]["port"])
	// sam sync --watch updates its stack in place: never the deployed one.
	sync := sections["default.sync.parameters"]
	require.NotEmpty(t, sync["stack_name"], "sam sync has a stack of its own")
	require.NotEqual(t, sections["default.global.parameters"]["stack_name"], sync["stack_name"], "sam sync has a stack of its own")
	// A parameter pinned here would silently undo a choice made with
	// --parameter-overrides on the next plain `sam deploy`.
	for _, name := range profileParameters {
		require.NotContains(t, sections["default.deploy.parameters"]["parameter_overrides"], name,
			"samconfig.toml pins %s", name)
	}
}
