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

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/samtemplate"
)

const modulePath = "github.com/ichido/ichido"

// functionDirs is the agreed mapping of SAM logical ids to code folders.
var functionDirs = map[string]string{
	"CreateTaskFunction": "create-task",
	"ListTasksFunction":  "list-tasks",
	"GetTaskFunction":    "get-task",
	"UpdateTaskFunction": "update-task",
	"DeleteTaskFunction": "delete-task",
	"MigrateFunction":    "migrate",
	// Queue-triggered: not behind the API.
	"TaskActivityFunction": "task-activity",
}

// agreedEnv lists the variables the code is agreed to read. The scan of the
// code must find each of them, so that a scan that finds nothing fails.
var agreedEnv = []string{
	"DB_AUTH", "DATABASE_URL", "DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "AWS_REGION",
	"DB_MAX_CONNS", "IDEMPOTENCY_STORE", "REDIS_URL", "IDEMPOTENCY_TTL", "LOG_LEVEL",
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

func functionByID(t *testing.T, id string) samtemplate.Function {
	t.Helper()
	for _, f := range projectTemplate(t).Functions() {
		if f.LogicalID == id {
			return f
		}
	}
	t.Fatalf("template.yaml has no function %s", id)
	return samtemplate.Function{}
}

// The template's functions are the agreed six, each with its code folder.
func TestFunctionsHaveCode(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
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
// every logical id that package taskfn serves has a route.
func TestRoutesHaveHandlers(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	tpl := projectTemplate(t)
	routed := map[string]bool{}
	for _, r := range tpl.Routes() {
		routed[r.Function] = true
		dir, ok := functionDirs[r.Function]
		require.True(t, ok, "route %s %s names %s, which is not a function", r.Method, r.Path, r.Function)
		ids := identifiersIn(t, filepath.Join(root, "functions", dir, "main.go"))
		require.True(t, ids[r.Function], "functions/%s/main.go does not mention %s: it must serve that function's handler", dir, r.Function)
	}
	require.False(t, routed["MigrateFunction"], "MigrateFunction must not be behind the API")

	// The logical ids that taskfn declares (constants whose value ends in
	// "Function").
	var served []string
	for _, c := range stringConsts(t, filepath.Join(root, "pkg", "taskfn")) {
		if strings.HasSuffix(c, "Function") {
			served = append(served, c)
		}
	}
	require.NotEmpty(t, served, "pkg/taskfn declares no logical ids")
	for _, id := range served {
		_, ok := functionDirs[id]
		require.True(t, ok, "pkg/taskfn serves %s, which template.yaml does not declare", id)
		if !unrouted[id] {
			require.True(t, routed[id], "pkg/taskfn serves %s, which has no route", id)
		}
	}
	for id := range functionDirs {
		if !unrouted[id] {
			require.True(t, routed[id], "%s has no route", id)
		}
	}
}

// unrouted are the functions that no API route reaches: the migrations,
// invoked after a deploy, and the task-events queue's consumer.
var unrouted = map[string]bool{"MigrateFunction": true, "TaskActivityFunction": true}

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
	fnDeps   map[string][]string // function import path -> module deps (and itself)
	pkgDirs  map[string]string   // module import path -> folder
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
		out, err := goList("-f", "{{.ImportPath}} {{.Dir}}", "./...")
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
	all := map[string]bool{}
	for id, dir := range functionDirs {
		fn := functionByID(t, id)
		path := modulePath + "/functions/" + dir
		pkgs, ok := deps[path]
		require.True(t, ok, "go list does not know %s", path)
		var folders []string
		for _, p := range pkgs {
			folders = append(folders, dirs[p])
		}
		reads := envReads(t, folders)
		for name := range reads {
			all[name] = true
			if runtimeProvided(name) || slices.Contains(refusedEnv, name) {
				continue
			}
			_, declared := fn.Environment[name]
			require.True(t, declared, "%s reads %s, which template.yaml does not declare for it", id, name)
		}
	}
	for _, name := range agreedEnv {
		require.True(t, all[name], "the scan of the functions' code did not find %s: the code or the scan changed", name)
	}
}

// Lambda refuses reserved names; the refused ones must stay unset.
func TestEnvironmentDeclaresNoReservedOrRefusedNames(t *testing.T) {
	t.Parallel()
	for _, fn := range projectTemplate(t).Functions() {
		for name := range fn.Environment {
			require.False(t, runtimeProvided(name), "%s declares %s, which Lambda sets itself", fn.LogicalID, name)
			require.NotContains(t, refusedEnv, name, fn.LogicalID)
		}
		require.Equal(t, "iam", fn.Environment["DB_AUTH"], fn.LogicalID)
		require.Empty(t, fn.Environment["DATABASE_URL"], "%s: DATABASE_URL must stay empty when deployed", fn.LogicalID)
	}
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

// The functions connect to the proxy as the database user their DB_USER
// names, and their IAM policy allows exactly that: rds-db:connect on
// dbuser:<the proxy's prx- id>/<that user>. The proxy requires TLS and IAM
// and holds a secret for that user.
func TestDatabaseAccessIsConsistent(t *testing.T) {
	t.Parallel()
	tpl := projectTemplate(t)
	proxies := tpl.ResourceIDs("AWS::RDS::DBProxy")
	require.Len(t, proxies, 1)
	proxyID := proxies[0]
	proxy := tpl.Resources[proxyID].Properties
	require.Equal(t, true, proxy["RequireTLS"], "RequireTLS")
	require.Equal(t, "POSTGRESQL", proxy["EngineFamily"])
	role, _ := getAtt(proxy["RoleArn"])
	require.Equal(t, "AWS::IAM::Role", tpl.Resources[role].Type, "the proxy's own role")

	// The database users the proxy can log in as: its secrets' usernames.
	secretUsers := map[string]bool{}
	auth, _ := proxy["Auth"].([]any)
	require.NotEmpty(t, auth)
	for _, a := range auth {
		am := a.(map[string]any)
		require.Equal(t, "REQUIRED", am["IAMAuth"], "every proxy Auth entry requires IAM")
		secret := tpl.Resources[ref(am["SecretArn"])]
		require.Equal(t, "AWS::SecretsManager::Secret", secret.Type, "proxy Auth SecretArn")
		gen, _ := secret.Properties["GenerateSecretString"].(map[string]any)
		tmplSub, _ := gen["SecretStringTemplate"].(map[string]any)
		m := regexp.MustCompile(`"username":\s*"\$\{(\w+)\}"`).FindStringSubmatch(str(tmplSub["Fn::Sub"]))
		require.NotNil(t, m, "secret %s: SecretStringTemplate must name its user from a parameter", ref(am["SecretArn"]))
		secretUsers[m[1]] = true
	}

	// The proxy's role reads exactly the secrets of its Auth list.
	var readable []string
	policies, _ := tpl.Resources[role].Properties["Policies"].([]any)
	for _, p := range policies {
		doc, _ := p.(map[string]any)["PolicyDocument"].(map[string]any)
		for _, st := range anySlice(doc["Statement"]) {
			stmt, _ := st.(map[string]any)
			require.Equal(t, "secretsmanager:GetSecretValue", stmt["Action"], "the proxy role's only permission")
			for _, r := range anySlice(stmt["Resource"]) {
				readable = append(readable, ref(r))
			}
		}
	}
	var authSecrets []string
	for _, a := range auth {
		authSecrets = append(authSecrets, ref(a.(map[string]any)["SecretArn"]))
	}
	require.ElementsMatch(t, authSecrets, readable, "the proxy role reads exactly the proxy's secrets")

	arnPattern := regexp.MustCompile(`^arn:\$\{AWS::Partition\}:rds-db:\$\{AWS::Region\}:\$\{AWS::AccountId\}:dbuser:\$\{(\w+)\}/\$\{(\w+)\}$`)
	for _, fn := range tpl.Functions() {
		user := ref(fn.EnvironmentRaw["DB_USER"])
		require.NotEmpty(t, user, "%s: DB_USER must be a !Ref to a parameter", fn.LogicalID)
		require.Contains(t, tpl.Section("Parameters"), user, fn.LogicalID)
		require.True(t, secretUsers[user], "%s connects as %s, which has no secret in the proxy's Auth list", fn.LogicalID, user)
		host, attr := getAtt(fn.EnvironmentRaw["DB_HOST"])
		require.Equal(t, [2]string{proxyID, "Endpoint"}, [2]string{host, attr}, "%s: DB_HOST", fn.LogicalID)
		require.Equal(t, "5432", fn.Environment["DB_PORT"], fn.LogicalID)

		var connects []any
		for _, stmt := range policyStatements(t, tpl, fn) {
			if stmt["Action"] == "rds-db:connect" || slices.Contains(anySlice(stmt["Action"]), any("rds-db:connect")) {
				connects = append(connects, stmt["Resource"])
			}
		}
		require.Len(t, connects, 1, "%s: exactly one rds-db:connect resource", fn.LogicalID)
		sub, _ := connects[0].(map[string]any)["Fn::Sub"].([]any)
		require.Len(t, sub, 2, "%s: rds-db:connect resource must be a !Sub [pattern, vars]", fn.LogicalID)
		m := arnPattern.FindStringSubmatch(str(sub[0]))
		require.NotNil(t, m, "%s: rds-db:connect resource %q", fn.LogicalID, sub[0])
		require.Equal(t, user, m[2], "%s: rds-db:connect names another user than DB_USER", fn.LogicalID)
		vars, _ := sub[1].(map[string]any)
		sel, _ := vars[m[1]].(map[string]any)["Fn::Select"].([]any)
		require.Len(t, sel, 2, "%s: the prx- id must be !Select [6, !Split [\":\", !GetAtt Proxy.DBProxyArn]]", fn.LogicalID)
		require.EqualValues(t, 6, sel[0])
		split, _ := sel[1].(map[string]any)["Fn::Split"].([]any)
		require.Len(t, split, 2)
		require.Equal(t, ":", split[0])
		r, a := getAtt(split[1])
		require.Equal(t, [2]string{proxyID, "DBProxyArn"}, [2]string{r, a}, fn.LogicalID)
	}
	require.Equal(t, "DatabaseAppUser", ref(functionByID(t, "CreateTaskFunction").EnvironmentRaw["DB_USER"]))
	require.Equal(t, "DatabaseMasterUser", ref(functionByID(t, "MigrateFunction").EnvironmentRaw["DB_USER"]))
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
	tpl := projectTemplate(t)
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
}

// The Valkey cache exists only when IdempotencyStore=redis, and then the
// functions are told to use it.
func TestRedisIsOptional(t *testing.T) {
	t.Parallel()
	tpl := projectTemplate(t)
	param, _ := tpl.Section("Parameters")["IdempotencyStore"].(map[string]any)
	require.Equal(t, "postgres", param["Default"])
	require.ElementsMatch(t, []any{"postgres", "redis"}, param["AllowedValues"])
	cond, _ := tpl.Section("Conditions")["UseRedis"].(map[string]any)
	require.Equal(t, []any{map[string]any{"Ref": "IdempotencyStore"}, "redis"}, cond["Fn::Equals"])

	caches := tpl.ResourceIDs("AWS::ElastiCache::ServerlessCache")
	require.Len(t, caches, 1)
	require.Equal(t, "UseRedis", tpl.Resources[caches[0]].Raw["Condition"])
	require.Equal(t, "valkey", tpl.Resources[caches[0]].Properties["Engine"])
	for _, id := range tpl.ResourceIDs("AWS::EC2::SecurityGroup") {
		r := tpl.Resources[id]
		if ref(anySlice(tpl.Resources[caches[0]].Properties["SecurityGroupIds"])[0]) == id {
			require.Equal(t, "UseRedis", r.Raw["Condition"], id)
		}
	}
	for _, fn := range tpl.Functions() {
		require.Equal(t, map[string]any{"Fn::If": []any{"UseRedis", "redis", "postgres"}},
			fn.EnvironmentRaw["IDEMPOTENCY_STORE"], fn.LogicalID)
		ifRedis, _ := fn.EnvironmentRaw["REDIS_URL"].(map[string]any)["Fn::If"].([]any)
		require.Len(t, ifRedis, 3, fn.LogicalID)
		require.Equal(t, "UseRedis", ifRedis[0])
		require.Equal(t, map[string]any{"Fn::Sub": "rediss://${" + caches[0] + ".Endpoint.Address}:${" + caches[0] + ".Endpoint.Port}"}, ifRedis[1])
	}
}

// The outputs a deploy's user needs.
func TestOutputs(t *testing.T) {
	t.Parallel()
	outputs := projectTemplate(t).Section("Outputs")
	for _, name := range []string{"ApiUrl", "ProxyEndpoint", "UserPoolId", "UserPoolClientId", "MigrateFunctionName"} {
		require.Contains(t, outputs, name)
	}
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
}
