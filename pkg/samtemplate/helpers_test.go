package samtemplate_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/pkg/samtemplate"
)

// schemaEnv names the environment variable that points at the unified SAM
// schema when it is not in its usual place beside the project.
const schemaEnv = "SAM_SCHEMA_PATH"

// moduleRoot returns the folder holding the project's go.mod.
func moduleRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.Contains(string(b), "module github.com/ichido/ichido\n") {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, parent, dir, "the project's go.mod was not found above the working directory")
		dir = parent
	}
}

// schemaPath finds sam-unified.schema.json: $SAM_SCHEMA_PATH, else
// ../shared/schemas/ beside the project root, else schemas/ inside it.
func schemaPath(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(schemaEnv); p != "" {
		_, err := os.Stat(p)
		require.NoError(t, err, "%s=%s: the SAM schema is not there", schemaEnv, p)
		return p
	}
	root := moduleRoot(t)
	candidates := []string{
		filepath.Join(root, "..", "shared", "schemas", "sam-unified.schema.json"),
		filepath.Join(root, "schemas", "sam-unified.schema.json"),
	}
	for _, p := range candidates {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatalf("the unified SAM schema (sam-unified.schema.json) was not found; looked in %s; set %s to its path",
		strings.Join(candidates, ", "), schemaEnv)
	return ""
}

var (
	validatorOnce sync.Once
	validator     *samtemplate.Validator
	validatorErr  error
)

// sharedValidator loads the 6 MB schema once per test binary.
func sharedValidator(t testing.TB) *samtemplate.Validator {
	t.Helper()
	path := schemaPath(t)
	validatorOnce.Do(func() { validator, validatorErr = samtemplate.NewValidator(path) })
	require.NoError(t, validatorErr)
	return validator
}

var (
	templateOnce sync.Once
	tmpl         *samtemplate.Template
	templateErr  error
)

// projectTemplate loads the project's template.yaml once per test binary.
func projectTemplate(t testing.TB) *samtemplate.Template {
	t.Helper()
	path := filepath.Join(moduleRoot(t), "template.yaml")
	templateOnce.Do(func() { tmpl, templateErr = samtemplate.Load(path) })
	require.NoError(t, templateErr)
	return tmpl
}
