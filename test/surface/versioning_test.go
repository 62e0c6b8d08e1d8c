package surface

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The names operators alert on, which docs/versioning.md promises, are the
// names the engine writes: every outcome, metric, field of the log line and
// problem code of pkg/idempotency is listed there, so that adding one means
// saying so in the policy.
func TestVersionPolicyNamesEveryOperatorName(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(root(t), "pkg", "idempotency")
	policy, err := os.ReadFile(filepath.Join(root(t), "docs", "versioning.md"))
	require.NoError(t, err)
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)

	patterns := map[string]*regexp.Regexp{
		"outcome":      regexp.MustCompile(`(?m)^\s*Outcome\w+\s+Outcome\s*=\s*"([a-z_]+)"`),
		"metric":       regexp.MustCompile(`(?m)^const metric\w+\s*=\s*"([a-z_]+)"`),
		"problem code": regexp.MustCompile(`(?m)^\s*Code\w+\s*=\s*"([a-z_]+)"`),
	}
	// The log line's fields are the keys observe.go gives slog, and the
	// store group's per-operation keys.
	logPatterns := []*regexp.Regexp{
		regexp.MustCompile(`slog\.\w+\("([a-z_]+)"`),
		regexp.MustCompile(`Key:\s*"([a-z_]+)"`),
		regexp.MustCompile(`return "([a-z_]+_ms)", "([a-z_]+_calls)"`),
	}
	found := map[string]map[string]bool{}
	add := func(kind, name string) {
		if found[kind] == nil {
			found[kind] = map[string]bool{}
		}
		found[kind][name] = true
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for kind, re := range patterns {
			for _, m := range re.FindAllStringSubmatch(string(src), -1) {
				add(kind, m[1])
			}
		}
		if filepath.Base(f) == "observe.go" {
			for _, re := range logPatterns {
				for _, m := range re.FindAllStringSubmatch(string(src), -1) {
					for _, name := range m[1:] {
						add("log field", name)
					}
				}
			}
		}
	}
	for _, kind := range []string{"outcome", "metric", "problem code", "log field"} {
		require.NotEmpty(t, found[kind], "no %s found in pkg/idempotency: is this test's pattern out of date?", kind)
		var missing []string
		for name := range found[kind] {
			if !strings.Contains(string(policy), "`"+name+"`") {
				missing = append(missing, name)
			}
		}
		sort.Strings(missing)
		require.Empty(t, missing, "docs/versioning.md (What operators alert on) does not name the %ss %v that pkg/idempotency writes: list them there", kind, missing)
	}
}
