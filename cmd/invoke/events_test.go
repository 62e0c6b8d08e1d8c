package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/stretchr/testify/require"
	"golang.org/x/sync/errgroup"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/lambdarie"
	"github.com/ichido/ichido/internal/samtemplate"
	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// The user and the task the sample events address.
const (
	eventUser = "7d4c1f9e-3b2a-4c8d-9e6f-1a2b3c4d5e6f"
	eventTask = "5b7d1c2e-9f3a-4e6b-8c1d-2a3b4c5d6e7f"
)

// replay is one event sent to one function, and what must come back.
type replay struct {
	file     string
	function string
	status   int
	code     string // the problem's code, for problem+json answers
	check    func(t *testing.T, resp events.APIGatewayV2HTTPResponse, body map[string]any)
}

// TestEventsUnderEmulator replays every file in events/ against the real
// bootstrap of its function, built here for the host and run under
// aws-lambda-rie with env.json's settings and a database of its own. The
// order makes the events meaningful together: migrate an empty schema,
// seed the task that the get/update/delete events address, create, replay,
// mismatch, refused keys and identity, list, get, update, delete, get
// again.
func TestEventsUnderEmulator(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, err := lambdarie.ModuleRoot()
	require.NoError(t, err)
	tpl, err := samtemplate.Load(filepath.Join(root, "template.yaml"))
	require.NoError(t, err)
	rie, err := lambdarie.Ensure(ctx)
	require.NoError(t, err)
	db := pgtest.NewEmpty(t) // MigrateFunction applies the migrations

	var createdID string
	var createdBody string
	sequence := []replay{
		{file: "migrate.json", function: "MigrateFunction", check: func(t *testing.T, _ events.APIGatewayV2HTTPResponse, body map[string]any) {
			require.NotEmpty(t, body["applied"], "an empty schema gets every migration")
			require.Greater(t, body["version"], float64(0))
		}},
		{file: "migrate.json", function: "MigrateFunction", check: func(t *testing.T, _ events.APIGatewayV2HTTPResponse, body map[string]any) {
			require.Empty(t, body["applied"], "a second run applies nothing")
		}},
		{file: "create-task.json", function: "CreateTaskFunction", status: 201, check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse, body map[string]any) {
			createdID, _ = body["id"].(string)
			createdBody = resp.Body
			require.NotEmpty(t, createdID)
			require.Equal(t, "/tasks/"+createdID, header(resp, "Location"))
			require.Equal(t, "Write the deploy guide", body["title"])
			require.Equal(t, "2026-12-31", body["due_date"])
			require.Empty(t, header(resp, "Idempotent-Replayed"))
		}},
		{file: "create-task-replay.json", function: "CreateTaskFunction", status: 201, check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse, _ map[string]any) {
			require.Equal(t, "true", header(resp, "Idempotent-Replayed"))
			require.Equal(t, createdBody, resp.Body, "a replay is the first body, byte for byte")
			require.Equal(t, "/tasks/"+createdID, header(resp, "Location"))
		}},
		{file: "create-task-auth0.json", function: "CreateTaskFunction", status: 201, check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse, body map[string]any) {
			require.Equal(t, "Sign in with Auth0", body["title"], "a subject that is not a UUID is a user")
			require.NotEqual(t, createdID, body["id"])
		}},
		{file: "create-task-mismatch.json", function: "CreateTaskFunction", status: 422, code: "idempotency_key_reused"},
		{file: "create-task-missing-key.json", function: "CreateTaskFunction", status: 400, code: "idempotency_key_missing"},
		{file: "create-task-invalid-key.json", function: "CreateTaskFunction", status: 400, code: "idempotency_key_invalid"},
		{file: "create-task-no-identity.json", function: "CreateTaskFunction", status: 401, code: "unauthenticated"},
		{file: "list-tasks.json", function: "ListTasksFunction", status: 200, check: func(t *testing.T, _ events.APIGatewayV2HTTPResponse, body map[string]any) {
			list, _ := body["tasks"].([]any)
			var ids []string
			for _, item := range list {
				ids = append(ids, item.(map[string]any)["id"].(string))
			}
			sort.Strings(ids)
			want := []string{createdID, eventTask}
			sort.Strings(want)
			require.Equal(t, want, ids, "the seeded task and the one created, once")
		}},
		{file: "get-task.json", function: "GetTaskFunction", status: 200, check: func(t *testing.T, _ events.APIGatewayV2HTTPResponse, body map[string]any) {
			require.Equal(t, eventTask, body["id"])
			require.Equal(t, "todo", body["status"])
		}},
		{file: "update-task.json", function: "UpdateTaskFunction", status: 200, check: func(t *testing.T, _ events.APIGatewayV2HTTPResponse, body map[string]any) {
			require.Equal(t, eventTask, body["id"])
			require.Equal(t, "done", body["status"])
		}},
		{file: "delete-task.json", function: "DeleteTaskFunction", status: 204, check: func(t *testing.T, resp events.APIGatewayV2HTTPResponse, _ map[string]any) {
			require.Empty(t, resp.Body)
		}},
		{file: "get-task.json", function: "GetTaskFunction", status: 404, code: "not_found"},
		// The task-events queue's consumer: each batch answers the records
		// to retry, as events/expected/ gives them.
		{file: "sqs-task-events.json", function: "TaskActivityFunction"},
		{file: "sqs-task-events-redelivery.json", function: "TaskActivityFunction"},
		{file: "sqs-task-events-fifo.json", function: "TaskActivityFunction"},
	}

	// Every event file is replayed.
	files, err := filepath.Glob(filepath.Join(root, "events", "*.json"))
	require.NoError(t, err)
	replayed := map[string]bool{}
	for _, r := range sequence {
		replayed[r.file] = true
	}
	for _, f := range files {
		require.True(t, replayed[filepath.Base(f)], "events/%s is not replayed by this test", filepath.Base(f))
	}

	// Build each function's bootstrap (in parallel: the builds share the
	// cache) and start one emulator per function.
	functions := map[string]bool{}
	for _, r := range sequence {
		functions[r.function] = true
	}
	var mu sync.Mutex
	emulators := map[string]*lambdarie.Emulator{}
	logs := map[string]*bytes.Buffer{}
	var g errgroup.Group
	g.SetLimit(2)
	for id := range functions {
		g.Go(func() error {
			bootstrap, err := lambdarie.BuildBootstrap(ctx, lambdarie.FunctionPackage(id), t.TempDir())
			if err != nil {
				return err
			}
			fn, err := findFunction(tpl, id)
			if err != nil {
				return err
			}
			env, err := functionEnv(fn, filepath.Join(root, "env.json"), true, db.URL, io.Discard)
			if err != nil {
				return err
			}
			out := &bytes.Buffer{}
			emu, err := lambdarie.Start(ctx, lambdarie.Options{
				Bootstrap:    bootstrap,
				RIE:          rie,
				Env:          env,
				FunctionName: id,
				Timeout:      time.Duration(number(tpl, id, "Timeout", 3)) * time.Second,
				Output:       &lockedWriter{mu: &mu, w: out},
			})
			if err != nil {
				return err
			}
			mu.Lock()
			emulators[id], logs[id] = emu, out
			mu.Unlock()
			return nil
		})
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, emu := range emulators {
			wg.Add(1)
			go func() { defer wg.Done(); emu.Stop() }()
		}
		wg.Wait()
	})
	require.NoError(t, g.Wait())

	for i, r := range sequence {
		if i == 2 {
			// The schema is migrated: seed the task that the get, update
			// and delete events address.
			_, err := db.Pool.Exec(ctx, `INSERT INTO tasks (id, user_id, title) VALUES ($1, $2, 'Seeded by the test')`, eventTask, eventUser)
			require.NoError(t, err)
		}
		payload, err := os.ReadFile(filepath.Join(root, "events", r.file))
		require.NoError(t, err)
		out, err := emulators[r.function].Invoke(ctx, payload)
		if err != nil {
			mu.Lock()
			t.Logf("%s logs:\n%s", r.function, logs[r.function].String())
			mu.Unlock()
		}
		require.NoError(t, err, "%s -> %s", r.file, r.function)

		if r.function == "TaskActivityFunction" {
			want, err := os.ReadFile(filepath.Join(root, "events", "expected", r.file))
			require.NoError(t, err)
			require.JSONEq(t, string(want), string(out), r.file)
			continue
		}
		if r.function == "MigrateFunction" {
			var body map[string]any
			require.NoError(t, json.Unmarshal(out, &body), string(out))
			r.check(t, events.APIGatewayV2HTTPResponse{}, body)
			continue
		}
		var resp events.APIGatewayV2HTTPResponse
		require.NoError(t, json.Unmarshal(out, &resp), string(out))
		require.Equal(t, r.status, resp.StatusCode, "%s -> %s: %s", r.file, r.function, resp.Body)
		var body map[string]any
		if resp.Body != "" {
			require.NoError(t, json.Unmarshal([]byte(resp.Body), &body), resp.Body)
		}
		if r.code != "" {
			require.Equal(t, "application/problem+json", header(resp, "Content-Type"), r.file)
			require.Equal(t, r.code, body["code"], r.file)
			require.Equal(t, float64(r.status), body["status"], r.file)
		}
		if r.check != nil {
			r.check(t, resp, body)
		}
	}
	requireActivity(t, db)
}

// requireActivity checks that the SQS sample batches, replayed in order
// (a batch, its redelivery, a FIFO batch), recorded each task event once:
// the resend of the first event under a new message id and the redelivered
// records added nothing.
func requireActivity(t *testing.T, db *pgtest.DB) {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT event_id, count(*) FROM task_activity GROUP BY event_id ORDER BY event_id`)
	require.NoError(t, err)
	got := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		require.NoError(t, rows.Scan(&id, &n))
		got[id] = n
	}
	require.NoError(t, rows.Err())
	require.Equal(t, map[string]int{"evt-0001-task-created": 1, "evt-0002-task-updated": 1, "evt-0006-other-task": 1}, got)
}

// TestInvokeCommand runs the command as `make invoke` does, once, with a
// bootstrap built beforehand.
func TestInvokeCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	root, err := lambdarie.ModuleRoot()
	require.NoError(t, err)
	db := apptest.New(t)
	bootstrap, err := lambdarie.BuildBootstrap(ctx, "./functions/list-tasks", t.TempDir())
	require.NoError(t, err)

	var stdout, stderr bytes.Buffer
	err = run(ctx, []string{
		"-fn", "ListTasksFunction",
		"-event", filepath.Join(root, "events", "list-tasks.json"),
		"-env-vars", filepath.Join(root, "env.json"),
		"-template", filepath.Join(root, "template.yaml"),
		"-database-url", db.URL,
		"-bootstrap", bootstrap,
	}, &stdout, &stderr)
	require.NoError(t, err, stderr.String())
	var resp events.APIGatewayV2HTTPResponse
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &resp), stdout.String())
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, `{"tasks":[],"next":null}`, resp.Body)
	require.Contains(t, stderr.String(), "START RequestId:", "the emulator's log goes to standard error")

	err = run(ctx, []string{"-fn", "NoSuchFunction", "-event", filepath.Join(root, "events", "list-tasks.json"),
		"-template", filepath.Join(root, "template.yaml")}, io.Discard, io.Discard)
	require.ErrorContains(t, err, "CreateTaskFunction", "an unknown function is refused with the list of known ones")
	err = run(ctx, []string{"-fn", "ListTasksFunction"}, io.Discard, io.Discard)
	require.Error(t, err)
}

func header(resp events.APIGatewayV2HTTPResponse, name string) string {
	for k, v := range resp.Headers {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
