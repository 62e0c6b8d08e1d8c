package lambdarie

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/ichido/ichido/internal/testkit/pgtest"
)

// RIEModule is the emulator's module path and the version the project
// pins, for `go install`.
const RIEModule = "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@v0.0.0-20261030222936-bef5c4ba774d"

// rieBinary is the name of the emulator's command.
const rieBinary = "aws-lambda-rie"

// ErrNoRIE is returned by Find when the emulator is not installed.
var ErrNoRIE = errors.New("lambdarie: aws-lambda-rie not found: run `make rie`, or `go install " + RIEModule + "`")

// Find returns the path of aws-lambda-rie: $AWS_LAMBDA_RIE, else the
// project's .local/bin/aws-lambda-rie, else the one on PATH.
func Find() (string, error) {
	if p := os.Getenv("AWS_LAMBDA_RIE"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("lambdarie: AWS_LAMBDA_RIE: %w", err)
		}
		return p, nil
	}
	if root, err := ModuleRoot(); err == nil {
		p := filepath.Join(root, ".local", "bin", rieBinary)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(rieBinary); err == nil {
		return p, nil
	}
	return "", ErrNoRIE
}

// Ensure returns the path of aws-lambda-rie, installing the pinned version
// into the project's .local/bin first when Find finds none.
func Ensure(ctx context.Context) (string, error) {
	if p, err := Find(); err == nil {
		return p, nil
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return Install(ctx, filepath.Join(root, ".local", "bin"))
}

// Install runs `go install` of the pinned emulator into dir and returns the
// binary's path.
func Install(ctx context.Context, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("lambdarie: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "install", RIEModule)
	cmd.Env = append(os.Environ(), "GOBIN="+dir, "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lambdarie: go install %s: %v\n%s", RIEModule, err, out)
	}
	return filepath.Join(dir, rieBinary), nil
}

// BuildBootstrap builds the Go main package pkg (a directory, e.g.
// "./functions/create-task", relative to the module root) as outDir/bootstrap,
// the way the deploy builds it (static, CGO_ENABLED=0, -tags lambda.norpc)
// but for the host's architecture so that it runs here: linux/$GOARCH.
func BuildBootstrap(ctx context.Context, pkg, outDir string) (string, error) {
	if runtime.GOOS != "linux" {
		return "", fmt.Errorf("lambdarie: the emulator runs on Linux only (this is %s)", runtime.GOOS)
	}
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("lambdarie: %w", err)
	}
	out, err := filepath.Abs(filepath.Join(outDir, "bootstrap"))
	if err != nil {
		return "", fmt.Errorf("lambdarie: %w", err)
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-tags", "lambda.norpc", "-trimpath", "-o", out, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+runtime.GOARCH, "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("lambdarie: go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

// FunctionPackage returns the main package of a function by the project's
// convention: CreateTaskFunction → ./functions/create-task.
func FunctionPackage(logicalID string) string {
	name := strings.TrimSuffix(logicalID, "Function")
	var b strings.Builder
	for i, r := range name {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return "./functions/" + b.String()
}

// ModuleRoot returns the repository's root, the directory of its top-level
// go.mod (not of the nested pkg/ or internal/testkit/ modules), searched
// upwards from the working directory.
func ModuleRoot() (string, error) { return pgtest.ModuleRoot() }
