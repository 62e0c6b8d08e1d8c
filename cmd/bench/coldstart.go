package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/ichido/ichido/internal/testkit/capture"
	"github.com/ichido/ichido/internal/testkit/pgtest"
	"github.com/ichido/ichido/pkg/dbpool"
)

// ColdStartResult is the CreateTaskFunction's bootstrap: its size as
// deployed (linux/arm64, stripped) and the time from starting the emulator
// to the first response, on this machine's architecture.
type ColdStartResult struct {
	BuildFlags string `json:"build_flags"`
	Arm64Bytes int64  `json:"arm64_bytes"`
	HostArch   string `json:"host_arch"`
	HostBytes  int64  `json:"host_bytes"`
	RIE        string `json:"rie"`
	// BuildSeconds is how long the two builds took (Go's build cache may
	// have held them).
	BuildSeconds float64   `json:"build_s"`
	Runs         []ColdRun `json:"runs"`
	// Medians over the runs.
	TotalMs       float64 `json:"total_ms"`
	ListenMs      float64 `json:"listen_ms"`
	FirstInvokeMs float64 `json:"first_invoke_ms"`
	WarmInvokeMs  float64 `json:"warm_invoke_ms"`
	InitMs        float64 `json:"init_ms"`
	// DBConnectMs is the median of fresh dbpool.New calls (one connection
	// made and checked), measured in this process: the part of the
	// function's init that is the database connect.
	DBConnectMs  float64   `json:"db_connect_ms"`
	DBConnectRun []float64 `json:"db_connect_runs_ms"`
}

// ColdRun is one cold start.
type ColdRun struct {
	// TotalMs is from starting the emulator process to the first response.
	TotalMs float64 `json:"total_ms"`
	// ListenMs is from starting the emulator to its accepting connections.
	ListenMs float64 `json:"listen_ms"`
	// FirstInvokeMs is from sending the first event to its response: the
	// emulator starts the bootstrap, which builds the functions
	// (taskfn.Build, with its database connect) and handles the event.
	FirstInvokeMs float64 `json:"first_invoke_ms"`
	// WarmInvokeMs is a second event to the same, now warm, process.
	WarmInvokeMs float64 `json:"warm_invoke_ms"`
	// InitMs is FirstInvokeMs - WarmInvokeMs: the bootstrap's start and
	// init.
	InitMs float64 `json:"init_ms"`
}

const lambdaBuildFlags = `CGO_ENABLED=0 GOOS=linux go build -tags lambda.norpc -trimpath -ldflags "-s -w"`

func (b *bench) coldStart(ctx context.Context) error {
	res := &ColdStartResult{BuildFlags: lambdaBuildFlags, HostArch: runtime.GOARCH}
	b.res.ColdStart = res
	root, err := pgtest.ModuleRoot()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "ichido-bench-bootstrap-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	buildStart := time.Now()
	arm, err := buildBootstrap(ctx, root, filepath.Join(dir, "arm64"), "arm64")
	if err != nil {
		return err
	}
	if res.Arm64Bytes, err = fileSize(arm); err != nil {
		return err
	}
	host, err := buildBootstrap(ctx, root, filepath.Join(dir, runtime.GOARCH), runtime.GOARCH)
	if err != nil {
		return err
	}
	if res.HostBytes, err = fileSize(host); err != nil {
		return err
	}
	res.BuildSeconds = time.Since(buildStart).Seconds()

	// The database connect on its own, fresh each time.
	for range b.cfg.coldRuns {
		d, err := timed(func() error {
			pool, err := dbpool.New(ctx, dbpool.Config{Auth: dbpool.AuthURL, URL: b.db.url})
			if err == nil {
				pool.Close()
			}
			return err
		})
		if err != nil {
			return err
		}
		res.DBConnectRun = append(res.DBConnectRun, ms(d))
	}
	res.DBConnectMs = median(res.DBConnectRun)

	if res.RIE, err = findRIE(b.cfg.riePath); err != nil {
		return err
	}
	for i := range b.cfg.coldRuns {
		r, err := b.coldRun(ctx, res.RIE, host, dir)
		if err != nil {
			return fmt.Errorf("cold start %d: %w", i+1, err)
		}
		res.Runs = append(res.Runs, r)
	}
	med := func(f func(ColdRun) float64) float64 {
		var xs []float64
		for _, r := range res.Runs {
			xs = append(xs, f(r))
		}
		return median(xs)
	}
	res.TotalMs = med(func(r ColdRun) float64 { return r.TotalMs })
	res.ListenMs = med(func(r ColdRun) float64 { return r.ListenMs })
	res.FirstInvokeMs = med(func(r ColdRun) float64 { return r.FirstInvokeMs })
	res.WarmInvokeMs = med(func(r ColdRun) float64 { return r.WarmInvokeMs })
	res.InitMs = med(func(r ColdRun) float64 { return r.InitMs })
	log.Printf("  bootstrap %d bytes (linux/arm64), %d (linux/%s); cold start %.1f ms (emulator up %.1f, first invoke %.1f, warm invoke %.1f); db connect %.1f ms",
		res.Arm64Bytes, res.HostBytes, res.HostArch, res.TotalMs, res.ListenMs, res.FirstInvokeMs, res.WarmInvokeMs, res.DBConnectMs)
	return nil
}

func buildBootstrap(ctx context.Context, root, dir, arch string) (string, error) {
	out := filepath.Join(dir, "bootstrap")
	gobin, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("building the %s bootstrap: the go command is not on PATH: %w", arch, err)
	}
	cmd := exec.CommandContext(ctx, gobin, "build", "-tags", "lambda.norpc", "-trimpath", "-ldflags", "-s -w", "-o", out, "./functions/create-task")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the %s bootstrap: %v\n%s", arch, err, b)
	}
	return out, nil
}

func fileSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// findRIE looks for aws-lambda-rie: the flag, $PATH, $GOBIN, GOPATH/bin,
// then the project's .local/bin.
func findRIE(flagPath string) (string, error) {
	if flagPath != "" {
		return flagPath, nil
	}
	if p, err := exec.LookPath("aws-lambda-rie"); err == nil {
		return p, nil
	}
	var dirs []string
	if d := os.Getenv("GOBIN"); d != "" {
		dirs = append(dirs, d)
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, d := range filepath.SplitList(strings.TrimSpace(string(out))) {
			dirs = append(dirs, filepath.Join(d, "bin"))
		}
	}
	if root, err := pgtest.ModuleRoot(); err == nil {
		dirs = append(dirs, filepath.Join(root, ".local", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "aws-lambda-rie")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", errors.New("aws-lambda-rie not found: go install github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d, or pass -rie")
}

// coldRun starts the emulator with the bootstrap, sends a POST /tasks event
// as soon as it listens, and times the first response.
func (b *bench) coldRun(ctx context.Context, rie, bootstrap, dir string) (ColdRun, error) {
	var r ColdRun
	port, err := pgtest.FreePort()
	if err != nil {
		return r, err
	}
	apiPort, err := pgtest.FreePort()
	if err != nil {
		return r, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	var stdout capture.Buffer
	cmd := exec.Command(rie, "--log-level", "error",
		"--runtime-interface-emulator-address", addr,
		"--runtime-api-address", "127.0.0.1:"+strconv.Itoa(apiPort),
		bootstrap)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "DB_AUTH=url", "DATABASE_URL="+b.db.url, "AWS_LAMBDA_FUNCTION_TIMEOUT=30")
	cmd.Stdout, cmd.Stderr = &stdout, &stdout
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}

	client := &http.Client{Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	url := "http://" + addr + "/2015-03-31/functions/function/invocations"
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // the emulator's own process group
		_ = cmd.Wait()
	}()
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			break
		}
		if time.Since(start) > 15*time.Second || ctx.Err() != nil {
			return r, fmt.Errorf("the emulator did not listen: %v\n%s", err, stdout.String())
		}
		time.Sleep(500 * time.Microsecond)
	}
	r.ListenMs = ms(time.Since(start))
	invoke := func() (time.Duration, error) {
		ev, err := json.Marshal(postEvent("/tasks", uuid.NewString(), uuid.NewString(), taskBody))
		if err != nil {
			return 0, err
		}
		t := time.Now()
		resp, err := client.Post(url, "application/json", bytes.NewReader(ev))
		if err != nil {
			return 0, err
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		d := time.Since(t)
		if err != nil {
			return d, err
		}
		var out struct {
			StatusCode int `json:"statusCode"`
		}
		if err := json.Unmarshal(body, &out); err != nil || out.StatusCode != http.StatusCreated {
			return d, fmt.Errorf("response is not a 201: %.300s\n%.2000s", body, stdout.String())
		}
		return d, nil
	}
	first, err := invoke()
	if err != nil {
		return r, err
	}
	r.TotalMs = ms(time.Since(start))
	r.FirstInvokeMs = ms(first)
	warm, err := invoke()
	if err != nil {
		return r, err
	}
	r.WarmInvokeMs = ms(warm)
	r.InitMs = r.FirstInvokeMs - r.WarmInvokeMs
	return r, nil
}

// cleanEnv is this process's environment without the variables the
// function reads, so that only those the bench sets reach it.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "DB_AUTH", "DATABASE_URL", "DB_HOST", "DB_PORT", "DB_NAME", "DB_USER", "DB_MAX_CONNS",
			"IDEMPOTENCY_STORE", "REDIS_URL", "IDEMPOTENCY_TABLE", "IDEMPOTENCY_TTL", "LOG_LEVEL", "AWS_LAMBDA_RUNTIME_API":
			continue
		}
		env = append(env, kv)
	}
	return env
}
