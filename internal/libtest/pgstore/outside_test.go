package pgstore_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// TestProgramOutsideTheRepository builds testdata/outside, a program in a
// module of its own in a folder outside the repository, and runs it on a
// database of its own in the test cluster (not the cron database): one
// pgstore.Migrate call creates the key store in the program's schema, and
// its wrapped handler, with a SubjectFunc of the program's own, answers a
// request, then replays it. The program imports only pkg/idempotency and
// pgstore of the library's module, and the test checks that too.
func TestProgramOutsideTheRepository(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := outsideModule(t)

	// A database of its own in the cluster.
	base, err := pgtest.SharedURL(ctx)
	require.NoError(t, err)
	admin, err := pgxpool.New(ctx, base)
	require.NoError(t, err)
	t.Cleanup(admin.Close) // after the cleanup below, which needs it
	name := fmt.Sprintf("orders_%d", time.Now().UnixNano()%1_000_000_000)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Exec(ctx, `SELECT cron.unschedule(jobid) FROM cron.job WHERE database = $1`, name)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	})
	u, err := url.Parse(base)
	require.NoError(t, err)
	u.Path = "/" + name

	imports := exec.CommandContext(ctx, "go", "list", "-mod=mod", "-f", `{{join .Imports "\n"}}`, ".")
	imports.Dir = dir
	imports.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	direct, err := imports.CombinedOutput()
	require.NoError(t, err, "%s", direct)
	var ours []string
	for _, imp := range strings.Fields(string(direct)) {
		if strings.HasPrefix(imp, "github.com/ichido/ichido/") {
			ours = append(ours, imp)
		}
	}
	require.Equal(t, []string{"github.com/ichido/ichido/pkg/idempotency", "github.com/ichido/ichido/pkg/idempotency/pgstore"}, ours)

	build := exec.CommandContext(ctx, "go", "build", "-mod=mod", "-o", filepath.Join(dir, "orders"), ".")
	build.Dir = dir
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "building the program outside the repository:\n%s", out)

	run := exec.CommandContext(ctx, filepath.Join(dir, "orders"))
	run.Env = append(os.Environ(), "DATABASE_URL="+u.String())
	out, err = run.CombinedOutput()
	require.NoError(t, err, "%s", out)
	// The decorator's JSON log and metric lines go to stdout too, as on
	// Lambda; the program's own lines are the rest.
	var own []string
	for _, line := range strings.SplitAfter(string(out), "\n") {
		if line != "" && !strings.HasPrefix(line, "{") {
			own = append(own, line)
		}
	}
	require.Equal(t, `key store in schema orders_idempotency, 1 migrations applied
201 {"order":"1"} replayed=""
201 {"order":"1"} replayed="true"
401 application/problem+json unauthenticated=true
`, strings.Join(own, ""))

	var jobDB string
	require.NoError(t, admin.QueryRow(ctx, `SELECT database FROM cron.job WHERE jobname = $1`, "purge-idempotency "+name+".orders_idempotency").Scan(&jobDB))
	require.Equal(t, name, jobDB, "the purge is scheduled from the cron database to run in the program's")
}

// module is the repository's root module path.
const module = pgtest.RootModule

// outsideModule writes testdata/outside into a new folder outside the
// repository as a module of its own that requires the library's user API
// and pgstore modules, replaced by this checkout's folders, with their
// go.sum files. The release check (internal/release) builds such programs
// through a module proxy, with no replace; this one runs on a database.
func outsideModule(t *testing.T) string {
	t.Helper()
	root, err := pgtest.ModuleRoot()
	require.NoError(t, err)
	dir := t.TempDir()
	src, err := os.ReadFile(filepath.Join("testdata", "outside", "main.go"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), src, 0o644))
	var sums []byte
	mod := "module example.com/orders\n\ngo 1.26.0\n\nrequire (\n"
	replace := "replace (\n"
	for _, m := range []string{"pkg", "pkg/idempotency/pgstore"} {
		mod += fmt.Sprintf("\t%s/%s v0.0.0\n", module, m)
		replace += fmt.Sprintf("\t%s/%s => %s\n", module, m, filepath.Join(root, filepath.FromSlash(m)))
		sum, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(m), "go.sum"))
		require.NoError(t, err)
		sums = append(sums, sum...)
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(mod+")\n\n"+replace+")\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sums, 0o644))
	return dir
}
