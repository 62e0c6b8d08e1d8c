package samtemplate_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/samtemplate"
)

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

// samTools returns the cfn-lint and SAM translator to test with: those of
// the virtual environment that `make deps` makes under .local/pytools when
// the system's Python cannot install them, else those on PATH.
func samTools(t testing.TB) samtemplate.Tools {
	t.Helper()
	venv := filepath.Join(moduleRoot(t), ".local", "pytools", "bin")
	if _, err := os.Stat(filepath.Join(venv, "python3")); err == nil {
		return samtemplate.Tools{Python: filepath.Join(venv, "python3"), CfnLint: filepath.Join(venv, "cfn-lint")}
	}
	return samtemplate.Tools{}
}

// mustRead returns a file of the project, by its path from the module root.
func mustRead(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(t), path))
	require.NoError(t, err)
	return string(b)
}
