// Package examples runs the store packages' examples that need a server,
// with the environment a user's program would have, on the repository's
// test servers. In their own packages they are skipped when that
// environment is not set.
package examples

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/dynamotest"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/internal/testkit/redistest"
	"github.com/ichido/ichido/pkg/idempotency/dynamostore"
)

func TestMain(m *testing.M) {
	code := m.Run()
	redistest.StopShared()
	dynamotest.StopShared()
	os.Exit(code)
}

// runExamples runs go test on the examples of pkg with env added, and checks
// that each of want ran and passed.
func runExamples(t *testing.T, pkg string, env map[string]string, want ...string) {
	t.Helper()
	cmd := exec.Command("go", "test", "-count=1", "-v", "-run", "^Example", "github.com/ichido/ichido/"+pkg)
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range want {
		require.Contains(t, string(out), "--- PASS: "+name+" ", "%s did not run:\n%s", name, out)
	}
	require.NotContains(t, string(out), "are skipped")
}

func TestPostgresExamples(t *testing.T) {
	t.Parallel()
	u, err := pgtest.SharedURL(context.Background())
	require.NoError(t, err)
	runExamples(t, "pkg/idempotency/pgstore", map[string]string{"DATABASE_URL": u}, "ExampleNew", "ExampleMigrate")
	runExamples(t, "pkg/dbpool", map[string]string{"DATABASE_URL": u, "DB_AUTH": "url"}, "ExampleNew")
}

func TestRedisExamples(t *testing.T) {
	t.Parallel()
	u, err := redistest.SharedURL()
	require.NoError(t, err)
	runExamples(t, "pkg/idempotency/redisstore", map[string]string{"REDIS_URL": u}, "ExampleNew")
}

func TestDynamoDBExamples(t *testing.T) {
	t.Parallel()
	endpoint, err := dynamotest.SharedEndpoint()
	require.NoError(t, err)
	client := dynamotest.NewClientAt(endpoint, dynamotest.ClientOptions{})
	table := fmt.Sprintf("examples-%d", os.Getpid())
	st, err := dynamostore.New(client, &dynamostore.Options{Table: table})
	require.NoError(t, err)
	_, err = client.CreateTable(context.Background(), st.CreateTableInput())
	require.NoError(t, err)
	runExamples(t, "pkg/idempotency/dynamostore", map[string]string{
		"AWS_ENDPOINT_URL_DYNAMODB": endpoint, "AWS_REGION": dynamotest.Region,
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "IDEMPOTENCY_TABLE": table,
	}, "ExampleNew")
}
