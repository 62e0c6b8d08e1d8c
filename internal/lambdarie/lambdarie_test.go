package lambdarie_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/lambdarie"

	"github.com/ichido/ichido/internal/testkit/capture"
)

// TestEmulator runs a real bootstrap (a test function built here) under the
// real emulator. It sets an environment variable of its own, so it does not
// run in parallel.
func TestEmulator(t *testing.T) {
	ctx := context.Background()
	rie, err := lambdarie.Ensure(ctx)
	require.NoError(t, err)
	bootstrap, err := lambdarie.BuildBootstrap(ctx, "./internal/lambdarie/testdata/echo", t.TempDir())
	require.NoError(t, err)

	t.Setenv("LAMBDARIE_CALLER_ONLY", "leaked")
	var logs capture.Buffer
	emu, err := lambdarie.Start(ctx, lambdarie.Options{
		Bootstrap:    bootstrap,
		RIE:          rie,
		Env:          map[string]string{"ECHO_VAR": "from env.json", "AWS_REGION": "eu-west-1"},
		FunctionName: "EchoFunction",
		Timeout:      7 * time.Second,
		Output:       &logs,
	})
	require.NoError(t, err)
	t.Cleanup(emu.Stop)

	type answer struct {
		Event         map[string]any     `json:"event"`
		Env           map[string]*string `json:"env"`
		Function      string             `json:"function"`
		RequestID     string             `json:"requestId"`
		SecondsToLive int                `json:"secondsToLive"`
	}
	invoke := func(payload string) answer {
		t.Helper()
		out, err := emu.Invoke(ctx, []byte(payload))
		require.NoError(t, err)
		var a answer
		require.NoError(t, json.Unmarshal(out, &a), string(out))
		return a
	}

	a := invoke(`{"env":["ECHO_VAR","LAMBDARIE_CALLER_ONLY","AWS_LAMBDA_RUNTIME_API","AWS_REGION","AWS_DEFAULT_REGION","TZ"],"x":1}`)
	require.Equal(t, float64(1), a.Event["x"])
	require.Equal(t, "EchoFunction", a.Function)
	require.NotEmpty(t, a.RequestID)
	require.InDelta(t, 7, a.SecondsToLive, 1, "the function's deadline is its timeout")
	require.NotNil(t, a.Env["ECHO_VAR"])
	require.Equal(t, "from env.json", *a.Env["ECHO_VAR"])
	require.Nil(t, a.Env["LAMBDARIE_CALLER_ONLY"], "the caller's environment must not reach the function")
	require.NotNil(t, a.Env["AWS_LAMBDA_RUNTIME_API"])
	require.Equal(t, "eu-west-1", *a.Env["AWS_REGION"])
	require.Equal(t, "eu-west-1", *a.Env["AWS_DEFAULT_REGION"])
	require.Equal(t, "UTC", *a.Env["TZ"])

	// A second invocation reuses the running bootstrap.
	b := invoke(`{"y":2}`)
	require.Equal(t, float64(2), b.Event["y"])
	require.NotEqual(t, a.RequestID, b.RequestID)

	body, err := emu.Invoke(ctx, []byte(`{"fail":true}`))
	var fe *lambdarie.FunctionError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "asked to fail", fe.Message)
	require.Contains(t, string(body), "errorMessage")
	require.Contains(t, logs.String(), "START RequestId:")

	emu.Stop()
	_, err = emu.Invoke(ctx, []byte(`{}`))
	require.Error(t, err, "a stopped emulator answers nothing")
}

func TestStartErrors(t *testing.T) {
	t.Parallel()
	_, err := lambdarie.Start(context.Background(), lambdarie.Options{})
	require.Error(t, err)
	_, err = lambdarie.Start(context.Background(), lambdarie.Options{Bootstrap: filepath.Join(t.TempDir(), "missing")})
	require.Error(t, err)
}

func TestFunctionPackage(t *testing.T) {
	t.Parallel()
	for id, pkg := range map[string]string{
		"CreateTaskFunction": "./functions/create-task",
		"ListTasksFunction":  "./functions/list-tasks",
		"GetTaskFunction":    "./functions/get-task",
		"UpdateTaskFunction": "./functions/update-task",
		"DeleteTaskFunction": "./functions/delete-task",
		"MigrateFunction":    "./functions/migrate",
		"PurgeCheckFunction": "./functions/purge-check",
	} {
		require.Equal(t, pkg, lambdarie.FunctionPackage(id))
	}
}

func TestEnvFile(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "env.json")
	require.NoError(t, os.WriteFile(path, []byte(`{
		"Parameters": {"DB_AUTH": "url", "DB_MAX_CONNS": 2, "DEBUG": true, "EXTRA": "x"},
		"MigrateFunction": {"DB_MAX_CONNS": "1"}
	}`), 0o644))
	f, err := lambdarie.LoadEnvFile(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"DB_AUTH": "url", "DB_MAX_CONNS": "2", "DEBUG": "true", "EXTRA": "x"}, f.For("CreateTaskFunction"))
	require.Equal(t, "1", f.For("MigrateFunction")["DB_MAX_CONNS"])
	require.Equal(t, []string{"DEBUG", "EXTRA"}, lambdarie.Undeclared(f.For("CreateTaskFunction"), map[string]string{"DB_AUTH": "", "DB_MAX_CONNS": ""}))

	require.NoError(t, os.WriteFile(path, []byte(`{"Parameters": {"A": {"nested": 1}}}`), 0o644))
	_, err = lambdarie.LoadEnvFile(path)
	require.Error(t, err)
	require.NoError(t, os.WriteFile(path, []byte(`[]`), 0o644))
	_, err = lambdarie.LoadEnvFile(path)
	require.Error(t, err)
}
