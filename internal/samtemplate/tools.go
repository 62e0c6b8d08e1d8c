package samtemplate

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
)

// ErrToolMissing is returned (wrapped) by Tools when cfn-lint or AWS's SAM
// translator (the samtranslator Python library) cannot be run. Its message
// names the command that installs them.
var ErrToolMissing = errors.New("samtemplate: cfn-lint or the SAM translator is not installed")

// ErrTransform is returned (wrapped) by Tools.Transform when the SAM
// translator refuses the template.
var ErrTransform = errors.New("samtemplate: the SAM translator refused the template")

// InstallHint is the command that installs the tools Tools runs.
const InstallHint = "make deps (or: python3 -m pip install 'cfn-lint>=1.51' 'aws-sam-translator>=1.110')"

//go:embed samtransform.py
var transformScript string

// Tools runs AWS's own template tools: cfn-lint, and the SAM translator
// through a small Python script (samtransform.py, embedded) that does what
// `sam package` and the AWS::Serverless transform of `sam deploy` do. The zero
// value finds both on PATH.
type Tools struct {
	// Python is the interpreter that has samtranslator. Defaults to
	// "python3" on PATH.
	Python string
	// CfnLint is the cfn-lint command. Defaults to "cfn-lint" on PATH, else
	// cfn-lint run as a module of Python.
	CfnLint string
}

// Finding is one message of cfn-lint.
type Finding struct {
	// Rule is the rule's id, e.g. "E3002".
	Rule string
	// Level is "Error", "Warning" or "Informational".
	Level string
	// Message is what cfn-lint says.
	Message string
	// Path is where in the template, e.g. "Resources/Cluster/Properties".
	Path string
	// Line is the line of the template the finding starts on.
	Line int
}

func (f Finding) String() string {
	return fmt.Sprintf("%s line %d %s: %s", f.Rule, f.Line, f.Path, f.Message)
}

// LintOptions are the settings of one cfn-lint run.
type LintOptions struct {
	// Parameters are parameter values for the template: cfn-lint then
	// checks the template as deployed with them (conditions resolved).
	// Defaults to none: every parameter's default, every condition both ways.
	Parameters map[string]string
	// IncludeChecks adds rule ids or prefixes that cfn-lint leaves out by
	// default, e.g. "I" for the informational rules. Defaults to none.
	IncludeChecks []string
	// Regions are the regions to check against. Defaults to cfn-lint's own
	// default (us-east-1).
	Regions []string
}

// TransformOptions are the settings of one translation.
type TransformOptions struct {
	// Parameters are parameter values passed to the translator, as a deploy
	// passes --parameter-overrides. Defaults to none (every default).
	Parameters map[string]string
	// Region is the region the template is deployed to. Defaults to
	// "us-east-1".
	Region string
	// Bucket is the S3 bucket that local artifacts are said to be uploaded
	// to. Defaults to a placeholder bucket name.
	Bucket string
}

func (t Tools) python() string {
	if t.Python != "" {
		return t.Python
	}
	return "python3"
}

// cfnLintCommand returns the command line that starts cfn-lint.
func (t Tools) cfnLintCommand(ctx context.Context) ([]string, error) {
	if t.CfnLint != "" {
		return []string{t.CfnLint}, nil
	}
	if t.Python == "" {
		if p, err := exec.LookPath("cfn-lint"); err == nil {
			return []string{p}, nil
		}
	}
	// pip --user and virtual environments may leave the script off PATH.
	const run = "import sys; from cfnlint.runner import main; sys.exit(main())"
	if err := exec.CommandContext(ctx, t.python(), "-c", "import cfnlint.runner").Run(); err != nil {
		return nil, fmt.Errorf("%w: cfn-lint is neither on PATH nor importable by %s; run %s", ErrToolMissing, t.python(), InstallHint)
	}
	return []string{t.python(), "-c", run, "cfn-lint"}, nil
}

// Lint runs cfn-lint on the template at path and returns its findings, in
// line order. An error means cfn-lint could not run or its output could not
// be read; findings are not errors.
func (t Tools) Lint(ctx context.Context, path string, opts LintOptions) ([]Finding, error) {
	argv, err := t.cfnLintCommand(ctx)
	if err != nil {
		return nil, err
	}
	args := append(argv[1:], "--format", "json")
	if len(opts.IncludeChecks) > 0 {
		args = append(args, "--include-checks")
		args = append(args, opts.IncludeChecks...)
	}
	if len(opts.Regions) > 0 {
		args = append(args, "--regions")
		args = append(args, opts.Regions...)
	}
	if len(opts.Parameters) > 0 {
		args = append(args, "--parameters")
		args = append(args, keyValues(opts.Parameters)...)
	}
	args = append(args, "--", path)
	cmd := exec.CommandContext(ctx, argv[0], args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	var exit *exec.ExitError
	if runErr != nil && !errors.As(runErr, &exit) {
		return nil, fmt.Errorf("%w: %s: %v; run %s", ErrToolMissing, argv[0], runErr, InstallHint)
	}
	var raw []struct {
		Level    string
		Message  string
		Location struct {
			Start struct{ LineNumber int }
			Path  []any
		}
		Rule struct{ Id string }
	}
	if err := json.Unmarshal(stdout.Bytes(), &raw); err != nil {
		return nil, fmt.Errorf("samtemplate: cfn-lint %s: %v (exit %v): %s", path, err, runErr, strings.TrimSpace(stderr.String()))
	}
	findings := make([]Finding, 0, len(raw))
	for _, r := range raw {
		var parts []string
		for _, p := range r.Location.Path {
			parts = append(parts, fmt.Sprint(p))
		}
		findings = append(findings, Finding{
			Rule: r.Rule.Id, Level: r.Level, Message: r.Message,
			Path: strings.Join(parts, "/"), Line: r.Location.Start.LineNumber,
		})
	}
	sort.SliceStable(findings, func(i, j int) bool { return findings[i].Line < findings[j].Line })
	return findings, nil
}

// Transform packages the template at path (local CodeUri and other artifact
// paths become S3 locations, as `sam package` writes them) and expands it
// with AWS's SAM translator, as the AWS::Serverless-2016-10-31 transform of a
// deploy does. It returns the CloudFormation template as JSON.
func (t Tools) Transform(ctx context.Context, path string, opts TransformOptions) ([]byte, error) {
	args := []string{"-c", transformScript, path}
	if opts.Region != "" {
		args = append(args, "--region", opts.Region)
	}
	if opts.Bucket != "" {
		args = append(args, "--bucket", opts.Bucket)
	}
	for _, kv := range keyValues(opts.Parameters) {
		args = append(args, "--param", kv)
	}
	cmd := exec.CommandContext(ctx, t.python(), args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return stdout.Bytes(), nil
	case errors.As(err, &exit) && exit.ExitCode() == 1:
		return nil, fmt.Errorf("%w: %s: %s", ErrTransform, path, strings.TrimSpace(stderr.String()))
	case errors.As(err, &exit) && exit.ExitCode() == 3:
		return nil, fmt.Errorf("%w: %s; run %s", ErrToolMissing, strings.TrimSpace(stderr.String()), InstallHint)
	case errors.As(err, &exit):
		return nil, fmt.Errorf("samtemplate: the SAM transform of %s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
	default:
		return nil, fmt.Errorf("%w: %s: %v; run %s", ErrToolMissing, t.python(), err, InstallHint)
	}
}

// keyValues returns m as sorted Key=Value strings.
func keyValues(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}
