// Package lambdarie runs a function's real bootstrap binary under the AWS
// Lambda Runtime Interface Emulator (aws-lambda-rie, the emulator that `sam
// local invoke` runs inside its container), without Docker: it builds the
// bootstrap for the host, finds or installs the emulator, starts it on free
// loopback ports with the function's environment, posts events to it and
// stops it.
//
// The emulator is started as
//
//	aws-lambda-rie --log-level error \
//	               --runtime-interface-emulator-address 127.0.0.1:<port> \
//	               --runtime-api-address 127.0.0.1:<port2> <bootstrap>
//
// It serves the Lambda Invoke API on the first address
// (POST /2015-03-31/functions/function/invocations) and the Runtime API on
// the second, which it hands to the bootstrap as AWS_LAMBDA_RUNTIME_API.
// The emulator passes its own environment to the function, so the
// emulator's process gets exactly the function's environment and a few
// variables Lambda sets, never the caller's whole environment.
package lambdarie

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// Options configure an emulator.
type Options struct {
	// Bootstrap is the path of the function's bootstrap binary, built for
	// the host (see BuildBootstrap). Required.
	Bootstrap string
	// Env is the function's environment (its template variables with the
	// env.json overrides applied). Defaults to none.
	Env map[string]string
	// FunctionName is AWS_LAMBDA_FUNCTION_NAME. Defaults to "function".
	FunctionName string
	// Timeout is the function's timeout (AWS_LAMBDA_FUNCTION_TIMEOUT, whole
	// seconds): the deadline of the context the handler gets. Defaults to
	// 3 seconds, Lambda's default.
	Timeout time.Duration
	// MemoryMB is AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Defaults to 128.
	MemoryMB int
	// RIE is the path of the aws-lambda-rie binary. Defaults to Find().
	RIE string
	// Output receives the emulator's and the function's logs (START, END,
	// REPORT lines and whatever the function writes). Defaults to
	// io.Discard.
	Output io.Writer
	// LogLevel is the emulator's own log level (--log-level: debug, info,
	// warn, error). Given on the command line so that the function's
	// LOG_LEVEL, which the emulator would otherwise read, only concerns the
	// function. Defaults to "error".
	LogLevel string
	// StartTimeout bounds how long Start waits for the emulator to accept
	// connections. Defaults to 15 seconds.
	StartTimeout time.Duration
}

// Emulator is a running aws-lambda-rie with one function.
type Emulator struct {
	cmd    *exec.Cmd
	url    string
	done   chan struct{}
	waited error
	stop   sync.Once
}

// ErrExited is returned when the emulator process ends before it was
// stopped.
var ErrExited = errors.New("lambdarie: the emulator exited")

// Start starts the emulator with the function's bootstrap and waits until
// it accepts invocations. Stop it with Stop.
func Start(ctx context.Context, opts Options) (*Emulator, error) {
	if opts.Bootstrap == "" {
		return nil, errors.New("lambdarie: Options.Bootstrap is required")
	}
	bootstrap, err := filepath.Abs(opts.Bootstrap)
	if err != nil {
		return nil, fmt.Errorf("lambdarie: %w", err)
	}
	if _, err := os.Stat(bootstrap); err != nil {
		return nil, fmt.Errorf("lambdarie: bootstrap: %w", err)
	}
	if opts.RIE == "" {
		if opts.RIE, err = Find(); err != nil {
			return nil, err
		}
	}
	if opts.Output == nil {
		opts.Output = io.Discard
	}
	if opts.LogLevel == "" {
		opts.LogLevel = "error"
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 15 * time.Second
	}
	// A free port can be taken by someone else between the probe and the
	// emulator's bind; try again with new ports when that happens.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := start(ctx, bootstrap, opts)
		if err == nil {
			return e, nil
		}
		lastErr = err
		if !errors.Is(err, ErrExited) {
			break
		}
	}
	return nil, lastErr
}

func start(ctx context.Context, bootstrap string, opts Options) (*Emulator, error) {
	invokePort, err := freePort()
	if err != nil {
		return nil, err
	}
	runtimePort, err := freePort()
	if err != nil {
		return nil, err
	}
	invokeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(invokePort))
	cmd := exec.Command(opts.RIE,
		"--log-level", opts.LogLevel,
		"--runtime-interface-emulator-address", invokeAddr,
		"--runtime-api-address", net.JoinHostPort("127.0.0.1", strconv.Itoa(runtimePort)),
		bootstrap)
	cmd.Dir = filepath.Dir(bootstrap)
	cmd.Env = environment(bootstrap, opts)
	cmd.Stdout = opts.Output
	cmd.Stderr = opts.Output
	// Its own process group, so that Stop also ends the bootstrap the
	// emulator started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("lambdarie: starting %s: %w", opts.RIE, err)
	}
	e := &Emulator{
		cmd:  cmd,
		url:  "http://" + invokeAddr + "/2015-03-31/functions/function/invocations",
		done: make(chan struct{}),
	}
	go func() {
		e.waited = cmd.Wait()
		close(e.done)
	}()
	deadline := time.Now().Add(opts.StartTimeout)
	for {
		conn, err := net.DialTimeout("tcp", invokeAddr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("%w while starting (%v)", ErrExited, e.waited)
		case <-ctx.Done():
			e.Stop()
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			e.Stop()
			return nil, fmt.Errorf("lambdarie: the emulator did not listen on %s within %s", invokeAddr, opts.StartTimeout)
		}
	}
}

// environment is the emulator's (and so the function's) environment: what
// Lambda sets for a provided.al2023 function, then the function's own
// variables. The caller's environment is not inherited; only PATH is kept,
// so that the emulator can run.
func environment(bootstrap string, opts Options) []string {
	name := opts.FunctionName
	if name == "" {
		name = "function"
	}
	timeout := int((opts.Timeout + time.Second - 1) / time.Second)
	if timeout <= 0 {
		timeout = 3
	}
	memory := opts.MemoryMB
	if memory <= 0 {
		memory = 128
	}
	env := map[string]string{
		"PATH":                            os.Getenv("PATH"),
		"TZ":                              "UTC",
		"LANG":                            "en_US.UTF-8",
		"LAMBDA_TASK_ROOT":                filepath.Dir(bootstrap),
		"AWS_REGION":                      "us-east-1",
		"AWS_DEFAULT_REGION":              "us-east-1",
		"AWS_LAMBDA_FUNCTION_NAME":        name,
		"AWS_LAMBDA_FUNCTION_VERSION":     "$LATEST",
		"AWS_LAMBDA_FUNCTION_MEMORY_SIZE": strconv.Itoa(memory),
		"AWS_LAMBDA_FUNCTION_TIMEOUT":     strconv.Itoa(timeout),
		"AWS_LAMBDA_LOG_GROUP_NAME":       "/aws/lambda/" + name,
		"AWS_LAMBDA_LOG_STREAM_NAME":      "local",
		"_HANDLER":                        "bootstrap",
	}
	for k, v := range opts.Env {
		env[k] = v
	}
	if r, ok := opts.Env["AWS_REGION"]; ok && r != "" {
		env["AWS_DEFAULT_REGION"] = r
	}
	// The emulator switches to another mode when it sees this variable.
	delete(env, "AWS_LAMBDA_MAX_CONCURRENCY")
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// URL returns the emulator's invocation URL.
func (e *Emulator) URL() string { return e.url }

// FunctionError is the error document a function returns instead of a
// response (the handler returned an error or panicked, or the runtime
// failed).
type FunctionError struct {
	// Type is errorType, e.g. "errorString".
	Type string `json:"errorType"`
	// Message is errorMessage.
	Message string `json:"errorMessage"`
}

func (e *FunctionError) Error() string {
	return fmt.Sprintf("lambdarie: function error %s: %s", e.Type, e.Message)
}

// Invoke posts payload to the function and returns its response document.
// A function error is returned as a *FunctionError, with the error
// document as the payload.
func (e *Emulator) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, bytes.NewReader(payload))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		select {
		case <-e.done:
			return nil, fmt.Errorf("%w (%v)", ErrExited, e.waited)
		default:
		}
		return nil, fmt.Errorf("lambdarie: invoking: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("lambdarie: reading the response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return body, fmt.Errorf("lambdarie: the emulator answered %s: %s", resp.Status, bytes.TrimSpace(body))
	}
	if fe := asFunctionError(body); fe != nil {
		return body, fe
	}
	return body, nil
}

func asFunctionError(body []byte) *FunctionError {
	var doc map[string]json.RawMessage
	if json.Unmarshal(body, &doc) != nil {
		return nil
	}
	_, hasType := doc["errorType"]
	_, hasMessage := doc["errorMessage"]
	_, hasStatus := doc["statusCode"]
	if !hasMessage || !hasType || hasStatus {
		return nil
	}
	var fe FunctionError
	if json.Unmarshal(body, &fe) != nil {
		return nil
	}
	return &fe
}

// Stop ends the emulator and the bootstrap it runs: SIGTERM to the
// process group, SIGKILL after two seconds.
func (e *Emulator) Stop() {
	e.stop.Do(func() {
		pgid := e.cmd.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-e.done:
		case <-time.After(2 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-e.done
		}
		// The bootstrap may outlive an emulator that exited by itself.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	})
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("lambdarie: finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
