package dbsetup

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPurgesDue: the hourly purge's instants while the database was up,
// within the window, and not in the last five minutes.
func TestPurgesDue(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.DateTime, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		name, now, up string
		want          int64
		last          string
	}{
		{"up for days: two instants in two hours", "2026-12-04 10:30:00", "2026-12-01 00:00:00", 2, "2026-12-04 10:00:00"},
		{"on the hour: too soon for this one", "2026-12-04 10:02:00", "2026-12-01 00:00:00", 1, "2026-12-04 09:00:00"},
		{"resumed a minute ago", "2026-12-04 10:30:00", "2026-12-04 10:29:00", 0, ""},
		{"resumed before the hour", "2026-12-04 10:30:00", "2026-12-04 09:55:00", 1, "2026-12-04 10:00:00"},
	} {
		n, last := purgesDue(at(tc.now), at(tc.up), 2*time.Hour)
		require.Equal(t, tc.want, n, tc.name)
		if tc.last != "" {
			require.Equal(t, at(tc.last), last, tc.name)
		}
	}
}
