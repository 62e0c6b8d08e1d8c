package idempotency

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLeaseUntil(t *testing.T) {
	t.Parallel()
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	const margin, maxLease = 2 * time.Second, 15 * time.Minute
	for _, tc := range []struct {
		name     string
		deadline time.Time // zero: no deadline
		want     time.Time
	}{
		{"no deadline: the maximum", time.Time{}, now.Add(maxLease)},
		{"deadline plus margin", now.Add(30 * time.Second), now.Add(32 * time.Second)},
		{"deadline far away: the maximum", now.Add(time.Hour), now.Add(maxLease)},
		{"deadline plus margin just under the maximum", now.Add(maxLease - margin - time.Millisecond), now.Add(maxLease - time.Millisecond)},
		{"deadline plus margin over the maximum", now.Add(maxLease - time.Second), now.Add(maxLease)},
		{"deadline now: expired", now, now},
		{"deadline passed: expired, not unknown", now.Add(-time.Second), now},
		{"deadline long passed", now.Add(-time.Hour), now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			if !tc.deadline.IsZero() {
				var cancel context.CancelFunc
				ctx, cancel = context.WithDeadline(ctx, tc.deadline)
				defer cancel()
			}
			require.Equal(t, tc.want, leaseUntil(ctx, now, now, margin, maxLease))
		})
	}
}
