package taskfn

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/apptest"
	"github.com/ichido/ichido/internal/problem"
	"github.com/ichido/ichido/internal/tasks"
	"github.com/ichido/ichido/internal/testkit/capture"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/dbpool"
	"github.com/ichido/ichido/pkg/idempotency"
	"github.com/ichido/ichido/pkg/idempotency/idemstore"
	"github.com/ichido/ichido/pkg/idempotency/redisstore"
)

// envOf returns a getenv over a fixed environment.
func envOf(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

// urlEnv is a local run's environment on the test's database.
func urlEnv(url string, changes map[string]string) func(string) string {
	vars := map[string]string{"DB_AUTH": "url", "DATABASE_URL": url}
	for k, v := range changes {
		vars[k] = v
	}
	return envOf(vars)
}

// event reads a sample event of events/, the files sam local invoke uses.
func event(t *testing.T, name string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "events", name))
	require.NoError(t, err)
	var req events.APIGatewayV2HTTPRequest
	require.NoError(t, json.Unmarshal(b, &req))
	return req
}

// forTask points a /tasks/{id} event at the task id.
func forTask(req events.APIGatewayV2HTTPRequest, id string) events.APIGatewayV2HTTPRequest {
	req.PathParameters = map[string]string{"id": id}
	req.RawPath = "/tasks/" + id
	req.RequestContext.HTTP.Path = req.RawPath
	return req
}

func invoke(t *testing.T, f *Functions, logicalID string, req events.APIGatewayV2HTTPRequest) events.APIGatewayV2HTTPResponse {
	t.Helper()
	h, ok := f.Handler(logicalID)
	require.True(t, ok, logicalID)
	resp, err := h(context.Background(), req)
	require.NoError(t, err)
	return resp
}

func problemCode(t *testing.T, resp events.APIGatewayV2HTTPResponse) string {
	t.Helper()
	require.Equal(t, problem.ContentType, resp.Headers["Content-Type"], resp.Body)
	var d problem.Details
	require.NoError(t, json.Unmarshal([]byte(resp.Body), &d))
	return d.Code
}

// TestBuildURLMode builds the functions as a local run does and invokes
// each with the sample events.
func TestBuildURLMode(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	var out capture.Buffer
	f, err := build(context.Background(), urlEnv(db.URL, map[string]string{"LOG_LEVEL": "debug"}), &out)
	require.NoError(t, err)
	t.Cleanup(f.Close)

	created := invoke(t, f, CreateTaskFunction, event(t, "create-task.json"))
	require.Equal(t, 201, created.StatusCode, created.Body)
	var task tasks.Task
	require.NoError(t, json.Unmarshal([]byte(created.Body), &task))
	require.Equal(t, "/tasks/"+task.ID, created.Headers["Location"])
	require.Equal(t, "Write the deploy guide", task.Title)

	replay := invoke(t, f, CreateTaskFunction, event(t, "create-task-replay.json"))
	require.Equal(t, 201, replay.StatusCode)
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, created.Body, replay.Body)

	for file, want := range map[string]struct {
		status int
		code   string
	}{
		"create-task-mismatch.json":    {422, idempotency.CodeKeyReused},
		"create-task-missing-key.json": {400, idempotency.CodeKeyMissing},
		"create-task-invalid-key.json": {400, idempotency.CodeKeyInvalid},
		"create-task-no-identity.json": {401, idempotency.CodeUnauthenticated},
	} {
		resp := invoke(t, f, CreateTaskFunction, event(t, file))
		require.Equal(t, want.status, resp.StatusCode, "%s: %s", file, resp.Body)
		require.Equal(t, want.code, problemCode(t, resp), file)
	}

	got := invoke(t, f, GetTaskFunction, forTask(event(t, "get-task.json"), task.ID))
	require.Equal(t, 200, got.StatusCode, got.Body)
	require.JSONEq(t, created.Body, got.Body)

	missing := invoke(t, f, GetTaskFunction, event(t, "get-task.json"))
	require.Equal(t, 404, missing.StatusCode)
	require.Equal(t, problem.CodeNotFound, problemCode(t, missing))

	list := invoke(t, f, ListTasksFunction, event(t, "list-tasks.json"))
	require.Equal(t, 200, list.StatusCode, list.Body)
	require.JSONEq(t, `{"tasks":[`+created.Body+`],"next":null}`, list.Body)

	updated := invoke(t, f, UpdateTaskFunction, forTask(event(t, "update-task.json"), task.ID))
	require.Equal(t, 200, updated.StatusCode, updated.Body)
	require.Contains(t, updated.Body, `"status":"done"`)
	again := invoke(t, f, UpdateTaskFunction, forTask(event(t, "update-task.json"), task.ID))
	require.Equal(t, "true", again.Headers["Idempotent-Replayed"])

	deleted := invoke(t, f, DeleteTaskFunction, forTask(event(t, "delete-task.json"), task.ID))
	require.Equal(t, 204, deleted.StatusCode, deleted.Body)
	require.Empty(t, deleted.Body)
	gone := invoke(t, f, GetTaskFunction, forTask(event(t, "get-task.json"), task.ID))
	require.Equal(t, 404, gone.StatusCode)

	_, ok := f.Handler(MigrateFunction)
	require.False(t, ok, "the migrate function is not an HTTP handler")
	_, ok = f.Handler("createTask")
	require.False(t, ok)
	for _, id := range LogicalIDs() {
		_, ok := f.Handler(id)
		require.True(t, ok, id)
	}

	// The decorator's log lines and metrics went to the functions' output.
	logs := out.String()
	require.Contains(t, logs, `"outcome":"replayed"`)
	require.Contains(t, logs, `"_aws"`)

	f.Close()
	f.Close() // harmless
	closed := invoke(t, f, GetTaskFunction, forTask(event(t, "get-task.json"), task.ID))
	require.Equal(t, 503, closed.StatusCode, "a closed pool is a 503, not a Go error")
}

// TestBuildExported checks the exported Build on a URL-mode environment.
func TestBuildExported(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	f, err := Build(context.Background(), urlEnv(db.URL, map[string]string{"LOG_LEVEL": "error", "IDEMPOTENCY_TTL": "1h", "IDEMPOTENCY_STORE": "postgres"}))
	require.NoError(t, err)
	defer f.Close()
	resp := invoke(t, f, ListTasksFunction, event(t, "list-tasks.json"))
	require.Equal(t, 200, resp.StatusCode, resp.Body)
	require.JSONEq(t, `{"tasks":[],"next":null}`, resp.Body)
	require.NotNil(t, f.Pool())
	require.NotNil(t, f.Logger())
}

// TestBuildRejectsSettings: a missing or contradictory environment is an
// error naming the variable, before anything is connected.
func TestBuildRejectsSettings(t *testing.T) {
	t.Parallel()
	const url = "postgres://app@127.0.0.1:1/app" // never connected to
	cases := []struct {
		name  string
		env   map[string]string
		names []string // variables the error must name
	}{
		{"nothing set", map[string]string{}, []string{"DB_AUTH"}},
		{"url mode without URL", map[string]string{"DB_AUTH": "url"}, []string{"DATABASE_URL"}},
		{"unknown auth", map[string]string{"DB_AUTH": "password", "DATABASE_URL": url}, []string{"DB_AUTH"}},
		{"iam mode with a URL", map[string]string{"DB_AUTH": "iam", "DATABASE_URL": url, "DB_HOST": "proxy.example", "DB_NAME": "app", "DB_USER": "app", "AWS_REGION": "eu-west-1"}, []string{"DATABASE_URL"}},
		{"unknown store", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "mongodb"}, []string{"IDEMPOTENCY_STORE"}},
		{"dynamodb without table", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "dynamodb", "AWS_REGION": "eu-west-1"}, []string{"IDEMPOTENCY_TABLE"}},
		{"dynamodb without region", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys"}, []string{"AWS_REGION"}},
		{"table with postgres store", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_TABLE": "keys"}, []string{"IDEMPOTENCY_TABLE", "IDEMPOTENCY_STORE"}},
		{"redis URL with dynamodb store", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "dynamodb", "IDEMPOTENCY_TABLE": "keys", "AWS_REGION": "eu-west-1", "REDIS_URL": "rediss://cache:6379"}, []string{"REDIS_URL", "dynamodb"}},
		{"redis without URL", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "redis"}, []string{"REDIS_URL"}},
		{"redis URL with postgres store", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_STORE": "postgres", "REDIS_URL": "rediss://cache:6379"}, []string{"REDIS_URL", "IDEMPOTENCY_STORE"}},
		{"TTL not a duration", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_TTL": "1 day"}, []string{"IDEMPOTENCY_TTL"}},
		{"TTL shorter than a lease", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_TTL": "1m"}, []string{"IDEMPOTENCY_TTL"}},
		{"TTL negative", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "IDEMPOTENCY_TTL": "-24h"}, []string{"IDEMPOTENCY_TTL"}},
		{"unknown log level", map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "LOG_LEVEL": "loud"}, []string{"LOG_LEVEL"}},
		{"everything wrong at once", map[string]string{"IDEMPOTENCY_STORE": "redis", "IDEMPOTENCY_TTL": "x", "LOG_LEVEL": "loud"}, []string{"DB_AUTH", "REDIS_URL", "IDEMPOTENCY_TTL", "LOG_LEVEL"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f, err := Build(context.Background(), envOf(c.env))
			require.Error(t, err)
			require.Nil(t, f)
			require.ErrorIs(t, err, ErrConfig)
			for _, name := range c.names {
				require.Contains(t, err.Error(), name)
			}
			_, err = NewMigrator(envOf(c.env))
			if strings.HasPrefix(c.names[0], "DB_") || c.names[0] == "DATABASE_URL" {
				require.ErrorIs(t, err, ErrConfig, "the migrate function reads the same database settings")
			}
		})
	}

	_, err := Build(context.Background(), envOf(map[string]string{"DB_AUTH": "url"}))
	var dbErr *dbpool.ConfigError
	require.ErrorAs(t, err, &dbErr)
	require.Equal(t, "DATABASE_URL", dbErr.Variable)
	_, err = Build(context.Background(), envOf(map[string]string{"DB_AUTH": "url", "DATABASE_URL": url, "LOG_LEVEL": "loud"}))
	var cfgErr *ConfigError
	require.ErrorAs(t, err, &cfgErr)
	require.Equal(t, "LOG_LEVEL", cfgErr.Variable)
}

// TestBuildUnreachableDatabase: a database that cannot be reached fails the
// cold start with an error that says where it tried, not a config error.
func TestBuildUnreachableDatabase(t *testing.T) {
	t.Parallel()
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	url := fmt.Sprintf("postgres://app@127.0.0.1:%d/app?connect_timeout=2", port)
	f, err := Build(context.Background(), urlEnv(url, nil))
	require.Error(t, err)
	require.Nil(t, f)
	require.False(t, errors.Is(err, ErrConfig))
	require.Contains(t, err.Error(), fmt.Sprint(port))
}

// TestBuildRedisStore: with IDEMPOTENCY_STORE=redis the keys live in
// Redis, not in the database, and the decorator behaves the same.
func TestBuildRedisStore(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	srv := redistest.StartT(t)
	f, err := build(context.Background(), urlEnv(db.URL, map[string]string{"IDEMPOTENCY_STORE": "redis", "REDIS_URL": srv.URL()}), io.Discard)
	require.NoError(t, err)
	defer f.Close()

	first := invoke(t, f, CreateTaskFunction, event(t, "create-task.json"))
	require.Equal(t, 201, first.StatusCode, first.Body)
	replay := invoke(t, f, CreateTaskFunction, event(t, "create-task-replay.json"))
	require.Equal(t, "true", replay.Headers["Idempotent-Replayed"])
	require.Equal(t, first.Body, replay.Body)
	mismatch := invoke(t, f, CreateTaskFunction, event(t, "create-task-mismatch.json"))
	require.Equal(t, 422, mismatch.StatusCode)

	var inPostgres int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM idempotency_keys`).Scan(&inPostgres))
	require.Zero(t, inPostgres, "the keys are kept in Redis")
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	keys, err := client.Keys(context.Background(), redisstore.DefaultKeyPrefix+"*").Result()
	require.NoError(t, err)
	require.Len(t, keys, 1)
}

// TestBuildRedisURLRefused: a REDIS_URL that would send keys in plain text
// over a network is a settings error, found before the database is reached.
func TestBuildRedisURLRefused(t *testing.T) {
	t.Parallel()
	for _, url := range []string{"redis://cache.example:6379", "http://cache.example:6379", "rediss://cache.example:6379?skip_verify=true"} {
		_, err := Build(context.Background(), urlEnv("postgres://app@127.0.0.1:1/app", map[string]string{"IDEMPOTENCY_STORE": "redis", "REDIS_URL": url}))
		require.ErrorIs(t, err, ErrConfig, url)
		require.ErrorContains(t, err, "REDIS_URL")
	}
}

// TestMigrate applies the migrations to an empty database, then finds
// nothing left to apply.
func TestMigrate(t *testing.T) {
	t.Parallel()
	db := pgtest.NewEmpty(t)
	env := urlEnv(db.URL, map[string]string{"DB_MAX_CONNS": "1"})

	first, err := Migrate(context.Background(), env)
	require.NoError(t, err)
	require.NotEmpty(t, first.Applied)
	require.Equal(t, int64(1), first.Applied[0].Version)
	require.Equal(t, first.Applied[len(first.Applied)-1].Version, first.Version)
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM tasks`).Scan(&n), "the tasks table exists")

	second, err := Migrate(context.Background(), env)
	require.NoError(t, err)
	require.Empty(t, second.Applied)
	require.Equal(t, first.Version, second.Version)
	b, err := json.Marshal(second)
	require.NoError(t, err)
	require.JSONEq(t, fmt.Sprintf(`{"applied":[],"version":%d}`, first.Version), string(b))

	_, err = Migrate(context.Background(), envOf(nil))
	require.ErrorIs(t, err, ErrConfig)
}

// TestBuildRefusesAStoreWithoutGrants: a database role that may not use the
// key store fails the cold start with the store's permanent error, instead
// of answering every protected request 500 later.
func TestBuildRefusesAStoreWithoutGrants(t *testing.T) {
	t.Parallel()
	db := apptest.New(t)
	ctx := context.Background()
	role := "taskfn_nogrant_" + strings.ReplaceAll(db.Schema, "t_", "")
	_, err := db.Pool.Exec(ctx, "CREATE ROLE "+role+" LOGIN")
	require.NoError(t, err)
	_, err = db.Pool.Exec(ctx, "GRANT USAGE ON SCHEMA "+db.Schema+" TO "+role)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+role)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+role)
	})
	u, err := url.Parse(db.URL)
	require.NoError(t, err)
	u.User = url.User(role)
	f, err := build(ctx, urlEnv(u.String(), nil), io.Discard)
	require.Error(t, err)
	require.Nil(t, f)
	require.True(t, idemstore.IsPermanent(err), "%v", err)
	require.Contains(t, err.Error(), "privilege")
}
