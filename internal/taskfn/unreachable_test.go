package taskfn

import (
	"context"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A deployed function whose database does not answer yet (an auto-paused
// Aurora cluster holds connections while it resumes, or refuses them)
// still starts, and answers each request 503 with Retry-After once the
// connect timeout runs out: well before the function's own deadline.
//
// Not parallel: it sets the AWS credentials variables that the default
// credential chain reads (static test keys, so that no metadata service is
// ever asked).
func TestUnreachableDatabaseAnswers503(t *testing.T) {
	for _, k := range []string{"AWS_PROFILE", "AWS_ROLE_ARN", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIDTESTEXAMPLE")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test-secret-key")
	t.Setenv("AWS_SESSION_TOKEN", "session")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("AWS_CONFIG_FILE", "/dev/null")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")

	// stalled accepts TCP connections and never says a word.
	stalled, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer stalled.Close()
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := stalled.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	refused, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refusedPort := refused.Addr().(*net.TCPAddr).Port
	require.NoError(t, refused.Close())

	ports := map[string]int{"no answer": stalled.Addr().(*net.TCPAddr).Port, "refused": refusedPort}
	for name, port := range ports {
		t.Run(name, func(t *testing.T) {
			env := envOf(map[string]string{
				"DB_AUTH": "iam", "DB_HOST": "127.0.0.1", "DB_PORT": strconv.Itoa(port),
				"DB_NAME": "ichido", "DB_USER": "ichido_app", "AWS_REGION": "eu-west-1",
				"DB_TLS_CA": "rds", "DB_CONNECT_TIMEOUT": "300ms", "LOG_LEVEL": "error",
			})
			f, err := build(context.Background(), env, io.Discard)
			require.NoError(t, err, "the cold start does not fail")
			defer f.Close()

			for _, c := range []struct{ id, event string }{
				{CreateTaskFunction, "create-task.json"},
				{ListTasksFunction, "list-tasks.json"},
			} {
				h, ok := f.Handler(c.id)
				require.True(t, ok)
				// The function's deadline, as Lambda gives it, is far away.
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				resp, err := h(ctx, event(t, c.event))
				require.NoError(t, err)
				require.NoError(t, ctx.Err(), "%s answered before its deadline", c.id)
				cancel()
				require.Equal(t, 503, resp.StatusCode, "%s: %s", c.id, resp.Body)
				require.NotEmpty(t, resp.Headers["Retry-After"], c.id)
				require.Contains(t, []string{"idempotency_store_unavailable", "service_unavailable"}, problemCode(t, resp), c.id)
				require.NotContains(t, resp.Body, "127.0.0.1", "nothing internal reaches the client")
			}
		})
	}
}
