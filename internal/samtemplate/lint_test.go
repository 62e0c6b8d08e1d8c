package samtemplate_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

// profileParameters are the parameters that choose a way to deploy: each
// combination of their allowed values is translated and linted.
var profileParameters = []string{"Stage", "IdempotencyStore"}

// lintChecks are the rules added to cfn-lint's defaults: the informational
// ones too (I3011 asks stateful resources for explicit deletion policies).
var lintChecks = []string{"I"}

func requireNoFindings(t *testing.T, what string, findings []samtemplate.Finding) {
	t.Helper()
	var lines []string
	for _, f := range findings {
		lines = append(lines, f.String())
	}
	require.Empty(t, findings, "cfn-lint on %s:\n%s", what, strings.Join(lines, "\n"))
}

// The template as written passes cfn-lint (which also runs the SAM
// translator on it, with its own placeholders).
func TestTemplatePassesCfnLint(t *testing.T) {
	t.Parallel()
	path := filepath.Join(moduleRoot(t), "template.yaml")
	findings, err := samTools(t).Lint(context.Background(), path, samtemplate.LintOptions{IncludeChecks: lintChecks})
	require.NoError(t, err)
	requireNoFindings(t, "template.yaml", findings)
}

// profiles returns every combination of the allowed values of the profile
// parameters that the template declares.
func profiles(t *testing.T, tpl *samtemplate.Template) []map[string]string {
	t.Helper()
	combos := []map[string]string{{}}
	params := tpl.Section("Parameters")
	for _, name := range profileParameters {
		p, ok := params[name].(map[string]any)
		if !ok {
			continue
		}
		allowed, _ := p["AllowedValues"].([]any)
		require.NotEmpty(t, allowed, "parameter %s has no AllowedValues", name)
		var next []map[string]string
		for _, c := range combos {
			for _, v := range allowed {
				m := map[string]string{name: fmt.Sprint(v)}
				for k, x := range c {
					m[k] = x
				}
				next = append(next, m)
			}
		}
		combos = next
	}
	require.Greater(t, len(combos), 1, "no profile parameter found in template.yaml")
	return combos
}

func profileName(p map[string]string) string {
	var parts []string
	for k, v := range p {
		parts = append(parts, k+"="+v)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// Each way to deploy, translated as `sam package` + `sam deploy` would,
// gives a CloudFormation template with no SAM resources left, every function
// code in S3, and nothing cfn-lint objects to with those parameter values.
func TestTransformedTemplatePassesCfnLint(t *testing.T) {
	t.Parallel()
	root := moduleRoot(t)
	tools := samTools(t)
	tpl := projectTemplate(t)
	for _, p := range profiles(t, tpl) {
		t.Run(profileName(p), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			out, err := tools.Transform(ctx, filepath.Join(root, "template.yaml"), samtemplate.TransformOptions{Parameters: p})
			require.NoError(t, err)

			var cfn struct {
				Transform any
				Resources map[string]struct {
					Type       string
					Properties map[string]any
				}
			}
			require.NoError(t, json.Unmarshal(out, &cfn))
			require.Nil(t, cfn.Transform, "the transform is applied")
			lambdas := 0
			for id, r := range cfn.Resources {
				require.False(t, strings.HasPrefix(r.Type, "AWS::Serverless::"), "%s is still %s", id, r.Type)
				if r.Type == "AWS::Lambda::Function" {
					lambdas++
					code, _ := r.Properties["Code"].(map[string]any)
					require.Equal(t, id+".zip", filepath.Base(fmt.Sprint(code["S3Key"])), "%s: Code", id)
				}
			}
			require.Len(t, tpl.Functions(), lambdas, "one Lambda function per AWS::Serverless::Function")

			path := filepath.Join(t.TempDir(), "packaged.json")
			require.NoError(t, os.WriteFile(path, out, 0o600))
			findings, err := tools.Lint(ctx, path, samtemplate.LintOptions{Parameters: p, IncludeChecks: lintChecks})
			require.NoError(t, err)
			requireNoFindings(t, "the translated template", findings)
		})
	}
}

// The checks can fail: cfn-lint reports a misspelt property, and the
// translator refuses a SAM resource it cannot expand.
func TestToolsReportBrokenTemplates(t *testing.T) {
	t.Parallel()
	tools := samTools(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		path := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		return path
	}
	ctx := context.Background()

	lint := write("lint.yaml", `
Resources:
  Cluster:
    Type: AWS::RDS::DBCluster
    DeletionPolicy: Snapshot
    UpdateReplacePolicy: Snapshot
    Properties:
      Engine: aurora-postgresql
      ServerlessV2ScalingConfiguration: {MinCapacity: 0.5, MaxCapacityy: 2}
`)
	findings, err := tools.Lint(ctx, lint, samtemplate.LintOptions{})
	require.NoError(t, err)
	require.NotEmpty(t, findings)
	require.Equal(t, "E3002", findings[0].Rule, findings)
	require.Contains(t, findings[0].Message, "MaxCapacityy")
	require.Equal(t, 9, findings[0].Line)

	sam := write("sam.yaml", `
Transform: AWS::Serverless-2016-10-31
Resources:
  F:
    Type: AWS::Serverless::Function
    Properties:
      CodeUri: .
      Runtime: provided.al2023
      Handler: bootstrap
      Events:
        E:
          Type: HttpApi
          Properties: {Method: POST, Path: /x, ApiId: !Ref Missing}
`)
	_, err = tools.Transform(ctx, sam, samtemplate.TransformOptions{})
	require.ErrorIs(t, err, samtemplate.ErrTransform)
	require.Contains(t, err.Error(), "ApiId must be a valid reference")

	// cfn-lint checks the template with the parameter values it is given:
	// the same template is fine with one value and wrong with another.
	cond := write("params.yaml", `
Parameters:
  Delay: {Type: Number, Default: 5}
Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      DelaySeconds: !Ref Delay
`)
	findings, err = tools.Lint(ctx, cond, samtemplate.LintOptions{Parameters: map[string]string{"Delay": "5"}})
	require.NoError(t, err)
	require.Empty(t, findings)
	findings, err = tools.Lint(ctx, cond, samtemplate.LintOptions{Parameters: map[string]string{"Delay": "9000"}})
	require.NoError(t, err)
	require.NotEmpty(t, findings)
	require.Contains(t, findings[0].Message, "9000")
}

// A tool that cannot be started is reported with the command to run.
func TestToolsMissing(t *testing.T) {
	t.Parallel()
	tools := samtemplate.Tools{Python: filepath.Join(t.TempDir(), "no-python"), CfnLint: filepath.Join(t.TempDir(), "no-cfn-lint")}
	_, err := tools.Lint(context.Background(), "template.yaml", samtemplate.LintOptions{})
	require.ErrorIs(t, err, samtemplate.ErrToolMissing)
	require.Contains(t, err.Error(), "make deps")
	_, err = tools.Transform(context.Background(), "template.yaml", samtemplate.TransformOptions{})
	require.ErrorIs(t, err, samtemplate.ErrToolMissing)
	require.Contains(t, err.Error(), "make deps")
}
