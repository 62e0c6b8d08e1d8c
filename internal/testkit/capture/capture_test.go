package capture_test

import (
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ichido/ichido/internal/testkit/capture"
)

// TestConcurrentWriters: every write lands whole, whatever the interleaving,
// and reading while writing is safe (run with -race).
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	var b capture.Buffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				_, _ = b.Write([]byte("line\n"))
				_ = b.String()
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	require.Len(t, lines, 800)
	for _, l := range lines {
		require.Equal(t, "line", l)
	}
}
