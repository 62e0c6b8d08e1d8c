package surface

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The README's "Coming from Powertools" table has a row for each option a
// Powertools user looks for, and every Go name it gives exists in the
// library.
func TestReadmeMapsEveryPowertoolsOption(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile(filepath.Join(root(t), "README.md"))
	require.NoError(t, err)
	_, section, ok := strings.Cut(string(readme), "## Coming from Powertools")
	require.True(t, ok, "README.md has no section \"Coming from Powertools\"")
	section, _, _ = strings.Cut(section, "\n## ")

	rows := map[string]string{}
	for line := range strings.SplitSeq(section, "\n") {
		cells := strings.Split(strings.Trim(line, "| "), " | ")
		if len(cells) == 2 && !strings.HasPrefix(cells[0], "---") {
			rows[cells[0]] = cells[1]
		}
	}
	for _, option := range []string{"event_key_jmespath", "payload_validation_jmespath", "raise_on_no_idempotency_key",
		"expires_after_seconds", "use_local_cache", "response_hook", "key_prefix", "in-progress expiry",
		"POWERTOOLS_IDEMPOTENCY_DISABLED", "persistence layers"} {
		found := false
		for powertools, ichido := range rows {
			if strings.Contains(powertools, option) {
				found = true
				require.NotEmpty(t, strings.TrimSpace(ichido), "the row of %s says nothing", option)
			}
		}
		require.True(t, found, "README.md's Powertools table has no row for %s", option)
	}

	var source strings.Builder
	require.NoError(t, filepath.WalkDir(filepath.Join(root(t), "pkg"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		b, err := os.ReadFile(path)
		source.Write(b)
		return err
	}))
	goName := regexp.MustCompile("`(?:[a-z]+\\.)?([A-Z][A-Za-z0-9]+)(?:\\.([A-Z][A-Za-z0-9]+))?")
	for _, ichido := range rows {
		for _, m := range goName.FindAllStringSubmatch(ichido, -1) {
			for _, name := range m[1:] {
				if name == "" || strings.ToUpper(name) == name {
					continue // empty, or an environment variable
				}
				require.Regexp(t, `\b`+name+`\b`, source.String(), "README.md's Powertools table names %s, which pkg/ does not have", name)
			}
		}
	}
}
