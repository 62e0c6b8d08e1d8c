package pgtest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCronSchedule: the stand-in runs jobs in the minutes their schedules
// name, as pg_cron 1.4 reads them.
func TestCronSchedule(t *testing.T) {
	t.Parallel()
	at := func(s string) time.Time {
		v, err := time.Parse(time.DateTime, s)
		require.NoError(t, err)
		return v
	}
	for _, tc := range []struct {
		schedule, at string
		want         bool
	}{
		{"* * * * *", "2026-12-04 10:17:00", true},
		{"0 * * * *", "2026-12-04 10:00:00", true},
		{"0 * * * *", "2026-12-04 10:01:00", false},
		{"30 3 * * *", "2026-12-04 03:30:00", true},
		{"30 3 * * *", "2026-12-04 04:30:00", false},
		{"*/15 * * * *", "2026-12-04 10:45:00", true},
		{"*/15 * * * *", "2026-12-04 10:46:00", false},
		{"5-10/5,20 * * * *", "2026-12-04 10:20:00", true},
		{"5-10/5,20 * * * *", "2026-12-04 10:07:00", false},
		{"0 0 * * 7", "2026-12-06 00:00:00", true}, // a Sunday
		{"0 0 1 * 1", "2026-12-07 00:00:00", true}, // a Monday: either day field
		{"0 0 1 * 1", "2026-12-08 00:00:00", false},
		{"0 0 1 * *", "2026-12-07 00:00:00", false},
	} {
		c, err := parseCronSchedule(tc.schedule)
		require.NoError(t, err, tc.schedule)
		require.Equal(t, tc.want, c.matches(at(tc.at)), "%s at %s", tc.schedule, tc.at)
	}
	for _, bad := range []string{"* * * *", "60 * * * *", "*/0 * * * *", "x * * * *", "5-1 * * * *"} {
		_, err := parseCronSchedule(bad)
		require.Error(t, err, bad)
	}
}

// TestJobClock: on its schedule a new job waits for the next minute it
// names and runs once in it; with Every it runs at once and then every
// Every.
func TestJobClock(t *testing.T) {
	t.Parallel()
	s, err := parseCronSchedule("* * * * *")
	require.NoError(t, err)
	seenAt := time.Date(2026, 12, 4, 10, 0, 30, 0, time.UTC)
	c := &jobClock{parsed: s, valid: true, considered: seenAt.Truncate(time.Minute)}
	require.False(t, c.due(seenAt.Add(20*time.Second), 0), "not in the minute it was first seen")
	require.True(t, c.due(seenAt.Add(31*time.Second), 0), "at the next minute's start")
	require.False(t, c.due(seenAt.Add(40*time.Second), 0), "once a minute")
	require.True(t, c.due(seenAt.Add(90*time.Second), 0))

	fast := &jobClock{}
	require.True(t, fast.due(seenAt, time.Second), "with Every: at once")
	require.False(t, fast.due(seenAt.Add(500*time.Millisecond), time.Second))
	require.True(t, fast.due(seenAt.Add(time.Second), time.Second))
}
