package rehearse_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ichido/ichido/internal/dbsetup"
	"github.com/ichido/ichido/internal/lambdarie"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/testkit/capture"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// The template's defaults for the database's names.
const (
	database    = "ichido"
	masterUser  = "ichido_admin"
	migrateUser = "ichido_migrate"
	appUser     = "ichido_app"
	checkUser   = "ichido_check"
	eventUser   = "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"
)

var taskFunctions = []string{"CreateTaskFunction", "ListTasksFunction", "GetTaskFunction", "UpdateTaskFunction", "DeleteTaskFunction", "TaskActivityFunction"}

// rig is what every rehearsal shares: the project, the template and the
// functions' bootstraps, built once.
type rig struct {
	root       string
	tpl        *samtemplate.Template
	rie        string
	bootstraps map[string]string
}

func TestRehearse(t *testing.T) {
	ctx := context.Background()
	root, err := lambdarie.ModuleRoot()
	require.NoError(t, err)
	tpl, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
	require.NoError(t, err)
	rie, err := lambdarie.Ensure(ctx)
	require.NoError(t, err)
	r := &rig{root: root, tpl: tpl, rie: rie, bootstraps: map[string]string{}}
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(2)
	for _, id := range append([]string{"MigrateFunction", "PurgeCheckFunction"}, taskFunctions...) {
		g.Go(func() error {
			b, err := lambdarie.BuildBootstrap(ctx, lambdarie.FunctionPackage(id), filepath.Join(t.TempDir(), id))
			mu.Lock()
			r.bootstraps[id] = b
			mu.Unlock()
			return err
		})
	}
	// MigrateFunction as a later version of the code would be, with one
	// more migration: one that fails, and one that succeeds.
	for name, sql := range map[string]string{
		failingMigration: "-- +goose Up\nCREATE TABLE rehearsal_never (id int);\nSELECT 1 / 0;\n-- +goose Down\nDROP TABLE rehearsal_never;\n",
		laterMigration:   "-- +goose Up\nCREATE TABLE rehearsal_later (id int);\n-- +goose Down\nDROP TABLE rehearsal_later;\n",
	} {
		g.Go(func() error {
			b, err := buildWithMigration(ctx, root, name, sql, filepath.Join(t.TempDir(), name))
			mu.Lock()
			r.bootstraps[name] = b
			mu.Unlock()
			return err
		})
	}
	require.NoError(t, g.Wait())

	bin16, env16, err := pgtest.InstallPG16(ctx)
	require.NoError(t, err)
	servers := []struct {
		name string
		opts pgtest.AuroraOptions
	}{
		// The engine the template deploys; its CREATEROLE rules are 16's.
		{"postgres16", pgtest.AuroraOptions{Options: pgtest.Options{Bin: bin16, Env: env16}, FakeCron: true}},
		// The real pg_cron (Debian's 15): the jobs as pg_cron keeps them.
		{"postgres15-pg_cron", pgtest.AuroraOptions{}},
	}
	var report []string
	for _, s := range servers {
		t.Run(s.name, func(t *testing.T) {
			s.opts.Dir = filepath.Join(t.TempDir(), "data")
			a, err := pgtest.StartAurora(ctx, s.opts)
			require.NoError(t, err)
			t.Cleanup(func() { _ = a.Destroy() })
			if s.opts.FakeCron {
				// The stand-in's jobs run as pg_cron's background workers
				// run them.
				runner := pgtest.StartFakeCron(a, pgtest.FakeCronOptions{})
				t.Cleanup(runner.Stop)
			}
			report = append(report, r.rehearse(t, a, s.opts.FakeCron))
		})
	}
	// pg_cron as it runs by default, over client sessions that log in with
	// a password: the IAM-only migrate user's jobs cannot run, and the
	// first deploy fails saying what to change.
	var refused string
	t.Run("postgres15-pg_cron-client-sessions", func(t *testing.T) {
		a, err := pgtest.StartAuroraCronClientSessions(ctx, pgtest.AuroraOptions{Options: pgtest.Options{Dir: filepath.Join(t.TempDir(), "data")}})
		require.NoError(t, err)
		t.Cleanup(func() { _ = a.Destroy() })
		cf := newCloudFormation(t)
		t.Logf("deploy 1 (Create) on a server whose pg_cron runs jobs over client sessions (cron.use_background_workers = off, password logins over TCP)")
		reply, _ := r.setup(t, stage{"dev", a.Port}, cf, "Create", nil, "")
		require.Equal(t, "FAILED", reply.Status, "pg_cron cannot run the migrate user's jobs: the deploy fails")
		require.Contains(t, reply.Reason, "shared_preload_libraries")
		require.Contains(t, reply.Reason, "reboot")
		require.NotContains(t, reply.Reason, "cron.use_background_workers = 1", "the fix names only what an operator can change")
		t.Logf("CloudFormation's reply: FAILED: %s", reply.Reason)
		var left int
		require.NoError(t, pool(t, a.URLAs("postgres")).QueryRow(ctx, `SELECT count(*) FROM cron.job WHERE jobname = $1`, dbsetup.ProbeJob).Scan(&left))
		require.Zero(t, left, "the probe is removed")
		refused = "refused (FAILED, with the fix) where pg_cron runs jobs over client sessions"
	})
	summary := "rehearsed the database setup and the functions on " + strings.Join(report, "; and on ") + "; the setup " + refused
	fmt.Println(summary)
	_ = os.WriteFile(filepath.Join(root, ".local", "rehearse.txt"), []byte(summary+"\n"), 0o644)
}

// stage is one deploy of the stack: which way the functions reach the
// database.
type stage struct {
	name string
	port int // pgbouncer (prod, RDS Proxy's place) or the server (dev)
}

// rehearse runs the whole rehearsal on one server and returns what to
// report of it.
func (r *rig) rehearse(t *testing.T, a *pgtest.Aurora, fakeCron bool) string {
	ctx := context.Background()
	bouncer, err := pgtest.StartPgBouncer(ctx, pgtest.PgBouncerOptions{Port: a.Port, Users: []string{"postgres", masterUser, migrateUser, appUser, checkUser}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = bouncer.Stop() })
	cf := newCloudFormation(t)
	super := pool(t, a.URLAs("postgres"))
	var version string
	require.NoError(t, super.QueryRow(ctx, `SELECT current_setting('server_version')`).Scan(&version))
	t.Logf("rehearsing on PostgreSQL %s, pgbouncer (transaction pooling) where Stage=prod has RDS Proxy", version)

	prod, dev := stage{"prod", bouncer.Port}, stage{"dev", a.Port}
	var kept string // a task created before the stage switches
	for i, st := range []stage{prod, dev, prod} {
		t.Logf("deploy %d: Stage=%s", i+1, st.name)
		reply, _ := r.setup(t, st, cf, map[bool]string{true: "Create", false: "Update"}[i == 0], nil, "")
		require.Equal(t, "SUCCESS", reply.Status, "the setup of deploy %d: %s", i+1, reply.Reason)
		require.NotEmpty(t, reply.Data["Cron"], "the setup saw pg_cron run a job as the migrate user")
		t.Logf("deploy %d: pg_cron ran a job as %s (proof: %s)", i+1, migrateUser, reply.Data["Cron"])
		require.Equal(t, "ichido-database-setup", reply.PhysicalResourceID)
		require.NotEqual(t, "0", reply.Data["Version"])
		if i == 0 {
			require.NotEqual(t, "0", reply.Data["Applied"], "the first deploy applies every migration")
		} else {
			require.Equal(t, "0", reply.Data["Applied"], "a redeploy applies nothing new")
		}
		if st.name == "dev" {
			// The server ends the app user's idle sessions (what lets a dev
			// cluster pause while Lambda keeps environments frozen with open
			// connections). Shortened here to a second, a warm function's
			// pool must replace the connection the server closed.
			_, err := super.Exec(ctx, `ALTER ROLE `+appUser+` IN DATABASE `+database+` SET idle_session_timeout = '1s'`)
			require.NoError(t, err)
		}
		fns := r.startFunctions(t, st)
		if kept == "" {
			kept = fns.create(t, "kept across the stage switches")
		}
		fns.exercise(t, kept)
		if st.name == "dev" {
			var closed int
			for _, id := range []string{"GetTaskFunction", "ListTasksFunction"} {
				f := map[string]string{"GetTaskFunction": "get-task.json", "ListTasksFunction": "list-tasks.json"}[id]
				time.Sleep(1500 * time.Millisecond) // past the idle timeout
				resp := fns.call(t, id, f, onTask(kept))
				require.Equal(t, 200, resp.StatusCode, "%s after the server closed its idle session: %s", id, resp.Body)
				closed++
			}
			require.Equal(t, 2, closed)
			log, err := os.ReadFile(filepath.Join(a.Dir, "server.log"))
			require.NoError(t, err)
			require.Contains(t, string(log), "idle-session timeout", "the server did close the app user's idle sessions")
		}
		fns.stop()
	}
	var idle string
	require.NoError(t, super.QueryRow(ctx, `SELECT array_to_string(s.setconfig, ',') FROM pg_db_role_setting s
		JOIN pg_roles r ON r.oid = s.setrole JOIN pg_database d ON d.oid = s.setdatabase
		WHERE r.rolname = $1 AND d.datname = $2`, appUser, database).Scan(&idle))
	require.Equal(t, "idle_session_timeout=60000ms", idle, "the setup bounds the app user's idle sessions")

	// The purge jobs, once, as pg_cron runs them.
	runPurges(t, super)
	checkPrivileges(t, super)
	for _, st := range []stage{prod, dev} {
		r.purgeCheck(t, st)
	}

	r.rollbacks(t, prod, cf, super)

	// A setup that fails fails the deploy: CloudFormation gets FAILED and
	// the reason. Here an object of the app user's is found (the migrate
	// user must own everything, the app user nothing); removed, the next
	// deploy succeeds.
	_, err = super.Exec(ctx, `CREATE TABLE stray (id int); ALTER TABLE stray OWNER TO `+appUser)
	require.NoError(t, err)
	reply, _ := r.setup(t, prod, cf, "Update", nil, "")
	require.Equal(t, "FAILED", reply.Status)
	require.Contains(t, reply.Reason, "table public.stray (owned by "+appUser+")")
	_, err = super.Exec(ctx, `DROP TABLE stray`)
	require.NoError(t, err)
	reply, _ = r.setup(t, prod, cf, "Update", nil, "")
	require.Equal(t, "SUCCESS", reply.Status, reply.Reason)
	if strings.HasPrefix(version, "16") {
		// On 16 the master user grants rds_iam only through rds_superuser
		// (a CREATEROLE user may grant only roles it administers).
		_, err = super.Exec(ctx, `REVOKE rds_superuser FROM `+masterUser)
		require.NoError(t, err)
		reply, _ = r.setup(t, prod, cf, "Update", nil, "")
		require.Equal(t, "FAILED", reply.Status)
		require.Contains(t, reply.Reason, "rds_iam")
		_, err = super.Exec(ctx, `GRANT rds_superuser TO `+masterUser)
		require.NoError(t, err)
	}
	// A setup whose settings are wrong answers too, rather than leave the
	// deploy waiting.
	reply, _ = r.setup(t, prod, cf, "Update", map[string]string{"DB_SETUP_APP_USER": ""}, "")
	require.Equal(t, "FAILED", reply.Status)
	require.Contains(t, reply.Reason, "DB_SETUP_APP_USER")
	// Delete (the stack is deleted) changes nothing in the database.
	var tasks int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM tasks`).Scan(&tasks))
	reply, _ = r.setup(t, prod, cf, "Delete", nil, "")
	require.Equal(t, "SUCCESS", reply.Status, reply.Reason)
	var after int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM tasks`).Scan(&after))
	require.Equal(t, tasks, after)

	cron := "pg_cron's SQL-only stand-in (the npm server has no pg_cron)"
	if !fakeCron {
		require.NoError(t, super.QueryRow(ctx, `SELECT 'pg_cron ' || extversion FROM pg_extension WHERE extname = 'pg_cron'`).Scan(&cron))
	}
	return fmt.Sprintf("PostgreSQL %s with %s and %s", version, cron, bouncerVersion(t))
}

// env returns a function's environment for a stage: the template's, as
// CloudFormation resolves it, with the connection in url mode (the
// rehearsal has no IAM) to the stage's endpoint, as the user the
// template's DB_USER names.
func (r *rig) env(t *testing.T, id string, st stage) map[string]string {
	t.Helper()
	tpl, err := r.tpl.Resolve(map[string]string{"Stage": st.name, "IdempotencyStore": "postgres"})
	require.NoError(t, err)
	var fn *samtemplate.Function
	for _, f := range tpl.Functions() {
		if f.LogicalID == id {
			fn = &f
		}
	}
	require.NotNil(t, fn, id)
	env := map[string]string{}
	for k, v := range fn.Environment {
		env[k] = v
	}
	// A !Ref to a parameter is its default, as in a deploy that sets none.
	for k, v := range fn.EnvironmentRaw {
		m, _ := v.(map[string]any)
		if name, ok := m["Ref"].(string); ok && len(m) == 1 {
			if p, ok := tpl.Section("Parameters")[name].(map[string]any); ok {
				env[k] = fmt.Sprint(p["Default"])
			}
		}
	}
	user := env["DB_USER"]
	require.NotEmpty(t, user, "%s: DB_USER", id)
	require.Equal(t, database, env["DB_NAME"], id)
	env["DB_AUTH"] = "url"
	env["DATABASE_URL"] = fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", user, st.port, database)
	for _, k := range []string{"DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "DB_TLS_CA"} {
		delete(env, k)
	}
	return env
}

func (r *rig) start(t *testing.T, id string, env map[string]string, out io.Writer) *lambdarie.Emulator {
	return r.startBootstrap(t, id, r.bootstraps[id], env, out)
}

func (r *rig) startBootstrap(t *testing.T, id, bootstrap string, env map[string]string, out io.Writer) *lambdarie.Emulator {
	t.Helper()
	timeout := 10 * time.Second
	if id == "MigrateFunction" {
		timeout = 300 * time.Second
	}
	emu, err := lambdarie.Start(context.Background(), lambdarie.Options{
		Bootstrap: bootstrap, RIE: r.rie, Env: env, FunctionName: id, Timeout: timeout, Output: out,
	})
	require.NoError(t, err)
	return emu
}

// setup sends MigrateFunction the request CloudFormation sends for the
// DatabaseSetup resource and returns the reply it PUT to the pre-signed
// URL, and the function's log. override changes the function's
// environment; version names the code (a bootstrap of r.bootstraps; empty:
// this code).
func (r *rig) setup(t *testing.T, st stage, cf *cloudFormation, requestType string, override map[string]string, version string) (cfnReply, string) {
	t.Helper()
	env := r.env(t, "MigrateFunction", st)
	for k, v := range override {
		env[k] = v
	}
	if version == "" {
		version = "MigrateFunction"
	}
	var logs capture.Buffer
	emu := r.startBootstrap(t, "MigrateFunction", r.bootstraps[version], env, &logs)
	defer emu.Stop()
	id := randomUUID()
	event := map[string]any{
		"RequestType":        requestType,
		"ServiceToken":       "arn:aws:lambda:eu-west-1:123456789012:function:ichido-MigrateFunction",
		"ResponseURL":        cf.url(id),
		"StackId":            "arn:aws:cloudformation:eu-west-1:123456789012:stack/ichido/" + id,
		"RequestId":          id,
		"LogicalResourceId":  "DatabaseSetup",
		"ResourceType":       "Custom::DatabaseSetup",
		"ResourceProperties": map[string]any{"Stage": st.name, "IdempotencyStore": "postgres", "CodeVersion": "1"},
	}
	if requestType != "Create" {
		event["PhysicalResourceId"] = "ichido-database-setup"
	}
	payload, _ := json.Marshal(event)
	_, err := emu.Invoke(context.Background(), payload)
	require.NoError(t, err, "the invocation itself succeeds; the outcome is in the reply\n%s", logs.String())
	reply, ok := cf.reply(id)
	require.True(t, ok, "MigrateFunction did not reply to CloudFormation\n%s", logs.String())
	require.Equal(t, id, reply.RequestID)
	require.Equal(t, "DatabaseSetup", reply.LogicalResourceID)
	return reply, logs.String()
}

// The extra migrations of the later code versions the rollbacks rehearse.
const (
	failingMigration = "00098_rehearsal_fails.sql"
	laterMigration   = "00099_rehearsal_later.sql"
)

// buildWithMigration builds MigrateFunction's bootstrap with one more
// migration, as a later version of the code would have it: the file is laid
// over the migrations folder (go build -overlay), the checkout unchanged.
func buildWithMigration(ctx context.Context, root, name, sql, outDir string) (string, error) {
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", err
	}
	file := filepath.Join(outDir, name)
	overlay := filepath.Join(outDir, "overlay.json")
	spec, _ := json.Marshal(map[string]any{"Replace": map[string]string{filepath.Join(root, "migrations", name): file}})
	if err := os.WriteFile(file, []byte(sql), 0o644); err != nil {
		return "", err
	}
	if err := os.WriteFile(overlay, spec, 0o644); err != nil {
		return "", err
	}
	out := filepath.Join(outDir, "bootstrap")
	cmd := osexec.CommandContext(ctx, "go", "build", "-overlay", overlay, "-tags", "lambda.norpc", "-trimpath", "-o", out, "./functions/migrate")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -overlay (%s): %v\n%s", name, err, b)
	}
	return out, nil
}

// rollbacks rehearses updates that fail and roll back, as CloudFormation
// runs them: the rollback's Update invokes the function's unqualified ARN
// with the earlier code, which must answer SUCCESS, or the stack is stuck
// in UPDATE_ROLLBACK_FAILED.
func (r *rig) rollbacks(t *testing.T, st stage, cf *cloudFormation, super *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	var before int64
	require.NoError(t, super.QueryRow(ctx, `SELECT max(version_id) FROM goose_db_version`).Scan(&before))

	// 1. A later version's migration fails: the deploy fails, and goose's
	// transaction leaves the database as it was.
	reply, _ := r.setup(t, st, cf, "Update", nil, failingMigration)
	require.Equal(t, "FAILED", reply.Status)
	require.Contains(t, reply.Reason, "version:98")
	require.Contains(t, reply.Reason, "division by zero")
	t.Logf("update to code with a failing migration: CloudFormation's reply: FAILED: %s", reply.Reason)
	var never bool
	require.NoError(t, super.QueryRow(ctx, `SELECT to_regclass('rehearsal_never') IS NULL`).Scan(&never))
	require.True(t, never, "the failed migration left nothing")
	// The rollback's Update, with the earlier code: nothing to migrate.
	reply, _ = r.setup(t, st, cf, "Update", nil, "")
	require.Equal(t, "SUCCESS", reply.Status, reply.Reason)
	require.Equal(t, "0", reply.Data["Applied"])
	require.Equal(t, fmt.Sprint(before), reply.Data["Version"])
	t.Logf("its rollback (Update with the earlier code): SUCCESS, %s migrations applied, version %s", reply.Data["Applied"], reply.Data["Version"])

	// 2. A later version migrates, and another resource of the same update
	// fails: the rollback's Update runs the earlier code on a database
	// newer than it knows. It answers SUCCESS and changes nothing.
	reply, _ = r.setup(t, st, cf, "Update", nil, laterMigration)
	require.Equal(t, "SUCCESS", reply.Status, reply.Reason)
	require.Equal(t, "1", reply.Data["Applied"])
	reply, logs := r.setup(t, st, cf, "Update", nil, "")
	require.Equal(t, "SUCCESS", reply.Status, "the rollback can finish: %s", reply.Reason)
	require.Equal(t, "0", reply.Data["Applied"])
	require.Equal(t, "99", reply.Data["Version"])
	require.Contains(t, reply.Data["Ahead"], "this code's newest is 6")
	require.Contains(t, logs, "database setup skipped")
	t.Logf("rollback after a later version migrated: SUCCESS, nothing migrated (%s)", reply.Data["Ahead"])

	// Back to this code's database, for the rest of the rehearsal (an
	// operator would leave it: the next deploy of the later code finds its
	// migration applied).
	_, err := super.Exec(ctx, `DROP TABLE rehearsal_later; DELETE FROM goose_db_version WHERE version_id = 99`)
	require.NoError(t, err)
}

// cloudFormation stands for the pre-signed S3 URLs CloudFormation hands a
// custom resource: it records the PUT replies.
type cloudFormation struct {
	srv     *httptest.Server
	mu      sync.Mutex
	replies map[string]cfnReply
}

type cfnReply struct {
	Status             string            `json:"Status"`
	Reason             string            `json:"Reason"`
	PhysicalResourceID string            `json:"PhysicalResourceId"`
	StackID            string            `json:"StackId"`
	RequestID          string            `json:"RequestId"`
	LogicalResourceID  string            `json:"LogicalResourceId"`
	Data               map[string]string `json:"Data"`
}

func newCloudFormation(t *testing.T) *cloudFormation {
	cf := &cloudFormation{replies: map[string]cfnReply{}}
	cf.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodPut {
			http.Error(w, "S3 takes a PUT", http.StatusMethodNotAllowed)
			return
		}
		var reply cfnReply
		if err := json.NewDecoder(req.Body).Decode(&reply); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		cf.mu.Lock()
		cf.replies[strings.TrimPrefix(req.URL.Path, "/")] = reply
		cf.mu.Unlock()
	}))
	t.Cleanup(cf.srv.Close)
	return cf
}

func (cf *cloudFormation) url(id string) string {
	return cf.srv.URL + "/" + id + "?X-Amz-Signature=rehearsal"
}

func (cf *cloudFormation) reply(id string) (cfnReply, bool) {
	cf.mu.Lock()
	defer cf.mu.Unlock()
	r, ok := cf.replies[id]
	return r, ok
}

// functions are the task functions of one deploy, running.
type functions struct {
	r    *rig
	emus map[string]*lambdarie.Emulator
	logs *capture.Buffer
}

func (r *rig) startFunctions(t *testing.T, st stage) *functions {
	t.Helper()
	f := &functions{r: r, emus: map[string]*lambdarie.Emulator{}, logs: &capture.Buffer{}}
	for _, id := range taskFunctions {
		env := r.env(t, id, st)
		require.Contains(t, env["DATABASE_URL"], "//"+appUser+"@", "%s connects as the app user", id)
		f.emus[id] = r.start(t, id, env, f.logs)
	}
	t.Cleanup(f.stop)
	return f
}

func (f *functions) stop() {
	for _, e := range f.emus {
		e.Stop()
	}
}

// call sends an API Gateway event built from one of the sample events.
func (f *functions) call(t *testing.T, id, file string, edit func(map[string]any)) events.APIGatewayV2HTTPResponse {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.r.root, "events", file))
	require.NoError(t, err)
	var event map[string]any
	require.NoError(t, json.Unmarshal(b, &event))
	if edit != nil {
		edit(event)
	}
	payload, _ := json.Marshal(event)
	out, err := f.emus[id].Invoke(context.Background(), payload)
	require.NoError(t, err, "%s\n%s", id, f.logs.String())
	var resp events.APIGatewayV2HTTPResponse
	require.NoError(t, json.Unmarshal(out, &resp), string(out))
	require.Less(t, resp.StatusCode, 500, "%s answered %d: %s\n%s", id, resp.StatusCode, resp.Body, f.logs.String())
	return resp
}

func withKey(key string) func(map[string]any) {
	return func(e map[string]any) { e["headers"].(map[string]any)["idempotency-key"] = key }
}

func onTask(id string, more ...func(map[string]any)) func(map[string]any) {
	return func(e map[string]any) {
		e["rawPath"] = "/tasks/" + id
		e["pathParameters"] = map[string]any{"id": id}
		e["requestContext"].(map[string]any)["http"].(map[string]any)["path"] = "/tasks/" + id
		for _, m := range more {
			m(e)
		}
	}
}

// create creates a task and returns its id.
func (f *functions) create(t *testing.T, title string) string {
	t.Helper()
	body, _ := json.Marshal(map[string]string{"title": title})
	resp := f.call(t, "CreateTaskFunction", "create-task.json", func(e map[string]any) {
		withKey(randomUUID())(e)
		e["body"] = string(body)
		delete(e["headers"].(map[string]any), "content-length")
	})
	require.Equal(t, 201, resp.StatusCode, resp.Body)
	var task map[string]any
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &task))
	return task["id"].(string)
}

// exercise runs every route and the SQS batch once.
func (f *functions) exercise(t *testing.T, kept string) {
	t.Helper()
	// create and replay
	key := randomUUID()
	body := `{"title":"rehearsed"}`
	create := func(e map[string]any) {
		withKey(key)(e)
		e["body"] = body
		delete(e["headers"].(map[string]any), "content-length")
	}
	first := f.call(t, "CreateTaskFunction", "create-task.json", create)
	require.Equal(t, 201, first.StatusCode, first.Body)
	replay := f.call(t, "CreateTaskFunction", "create-task.json", create)
	require.Equal(t, 201, replay.StatusCode)
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, first.Body, replay.Body)
	var task map[string]any
	require.NoError(t, json.Unmarshal([]byte(first.Body), &task))
	id := task["id"].(string)

	// get, list (the task kept from the first deploy is there too)
	got := f.call(t, "GetTaskFunction", "get-task.json", onTask(id))
	require.Equal(t, 200, got.StatusCode, got.Body)
	got = f.call(t, "GetTaskFunction", "get-task.json", onTask(kept))
	require.Equal(t, 200, got.StatusCode, "the task created before the stage switch: %s", got.Body)
	list := f.call(t, "ListTasksFunction", "list-tasks.json", nil)
	require.Equal(t, 200, list.StatusCode, list.Body)
	require.Contains(t, list.Body, id)
	require.Contains(t, list.Body, kept)

	// patch and delete, each with a key of its own
	patched := f.call(t, "UpdateTaskFunction", "update-task.json", onTask(id, withKey(randomUUID())))
	require.Equal(t, 200, patched.StatusCode, patched.Body)
	require.Contains(t, patched.Body, `"status":"done"`)
	deleted := f.call(t, "DeleteTaskFunction", "delete-task.json", onTask(id, withKey(randomUUID())))
	require.Equal(t, 204, deleted.StatusCode, deleted.Body)
	gone := f.call(t, "GetTaskFunction", "get-task.json", onTask(id))
	require.Equal(t, 404, gone.StatusCode)

	// the SQS activity batch: every record but the malformed one is done
	b, err := os.ReadFile(filepath.Join(f.r.root, "events", "sqs-task-events.json"))
	require.NoError(t, err)
	out, err := f.emus["TaskActivityFunction"].Invoke(context.Background(), b)
	require.NoError(t, err, f.logs.String())
	want, err := os.ReadFile(filepath.Join(f.r.root, "events", "expected", "sqs-task-events.json"))
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(out), f.logs.String())
}

// runPurges runs each purge job once as pg_cron would: its command, in its
// database, as the user it was scheduled by.
func runPurges(t *testing.T, super *pgxpool.Pool) {
	t.Helper()
	ctx := context.Background()
	_, err := super.Exec(ctx, `
		INSERT INTO idempotency_keys (key, user_id, request_hash, status, response_body, status_code, owner, lease_expires_at, created_at, expires_at)
		VALUES ('00000000-0000-4000-8000-000000000001', $1, 'h', 'completed', '{}', 200, 'rehearsal', NULL, now() - interval '2 days', now() - interval '1 day')`, eventUser)
	require.NoError(t, err)
	rows, err := super.Query(ctx, `SELECT jobname, command, database, username FROM cron.job WHERE jobname LIKE 'purge-%' ORDER BY jobname`)
	require.NoError(t, err)
	type job struct{ name, command, database, user string }
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		return j, r.Scan(&j.name, &j.command, &j.database, &j.user)
	})
	require.NoError(t, err)
	var names []string
	for _, j := range jobs {
		names = append(names, j.name)
		require.Equal(t, migrateUser, j.user, "job %s runs as the owner of the tables", j.name)
		require.Equal(t, database, j.database, j.name)
		conn, err := super.Acquire(ctx)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, `SET ROLE `+j.user)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, j.command)
		require.NoError(t, err, "job %s: %s", j.name, j.command)
		_, err = conn.Exec(ctx, `RESET ROLE`)
		require.NoError(t, err)
		conn.Release()
	}
	require.ElementsMatch(t, []string{"purge-cron-history", "purge-idempotency", "purge-task-deletions"}, names,
		"one job of each, scheduled by the migrate user only (none left by an earlier master-user setup)")
	var left int
	require.NoError(t, super.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE expires_at < now()`).Scan(&left))
	require.Zero(t, left, "the purge removed the expired key")
}

// checkPrivileges: the app user owns nothing and can neither change the
// schema nor touch the migration tools' tables.
func checkPrivileges(t *testing.T, super *pgxpool.Pool) {
	t.Helper()
	owned, err := dbsetup.Owned(context.Background(), super, appUser)
	require.NoError(t, err)
	require.Empty(t, owned)
	var create, goose bool
	require.NoError(t, super.QueryRow(context.Background(), `SELECT has_schema_privilege($1, 'public', 'CREATE'), has_table_privilege($1, 'goose_db_version', 'SELECT')`, appUser).Scan(&create, &goose))
	require.False(t, create)
	require.False(t, goose)
}

func bouncerVersion(t *testing.T) string {
	out, err := exec("pgbouncer", "--version")
	if err != nil {
		return "pgbouncer"
	}
	return strings.SplitN(strings.TrimSpace(out), "\n", 2)[0]
}

func pool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func exec(name string, args ...string) (string, error) {
	path, err := osexec.LookPath(name)
	if err != nil {
		path = "/usr/sbin/" + name
	}
	out, err := osexec.Command(path, args...).Output()
	return string(out), err
}

// purgeCheck invokes PurgeCheckFunction as its schedule does, as the check
// user the template names, and reads its embedded-metric line: it sees the
// migrate user's three purge jobs through the setup's function.
func (r *rig) purgeCheck(t *testing.T, st stage) {
	t.Helper()
	env := r.env(t, "PurgeCheckFunction", st)
	require.Contains(t, env["DATABASE_URL"], "//"+checkUser+"@", "the purge check connects as the check user")
	var logs capture.Buffer
	emu := r.start(t, "PurgeCheckFunction", env, &logs)
	defer emu.Stop()
	_, err := emu.Invoke(context.Background(), []byte(`{"version":"0","id":"1","detail-type":"Scheduled Event","source":"aws.events","detail":{}}`))
	require.NoError(t, err, logs.String())
	var line map[string]any
	for _, l := range strings.Split(logs.String(), "\n") {
		if i := strings.IndexByte(l, '{'); i >= 0 && strings.Contains(l, `"PurgeCheckRan"`) {
			require.NoError(t, json.Unmarshal([]byte(strings.TrimSpace(l[i:])), &line), l)
		}
	}
	require.NotNil(t, line, "the check's embedded-metric line\n%s", logs.String())
	require.EqualValues(t, 1, line["PurgeCheckRan"])
	require.EqualValues(t, 3, line["PurgeJobs"], "the check user sees the migrate user's purge jobs")
	require.EqualValues(t, 0, line["PurgeRunsFailed"])
	t.Logf("Stage=%s: PurgeCheckFunction as %s: PurgeJobs %v, PurgeRunsSucceeded %v, PurgeRunsDue %v, healthy %v",
		st.name, checkUser, line["PurgeJobs"], line["PurgeRunsSucceeded"], line["PurgeRunsDue"], line["healthy"])
}
