package main

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestQuantileInterpolates(t *testing.T) {
	t.Parallel()
	xs := []float64{5, 1, 4, 2, 3}
	require.Equal(t, 3.0, median(xs))
	require.Equal(t, 1.0, quantile(xs, 0))
	require.Equal(t, 5.0, quantile(xs, 1))
	require.InDelta(t, 4.96, quantile(xs, 0.99), 1e-9)
	require.Equal(t, []float64{5, 1, 4, 2, 3}, xs, "quantile must not reorder its input")
	require.True(t, math.IsNaN(median(nil)))
}

func TestSpread(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 50.0, relIQR([]float64{1, 1.5, 2, 2.5, 3}), 1e-9)
	require.Zero(t, relIQR([]float64{2}))
	require.InDelta(t, 0.0, cv([]float64{4, 4, 4}), 1e-9)
	require.InDelta(t, 50.0, cv([]float64{1, 2, 3}), 1e-9)
	require.True(t, math.IsNaN(ratio(1, 0)))
}

func TestCountLabel(t *testing.T) {
	t.Parallel()
	require.Equal(t, "10^4", countLabel(10_000))
	require.Equal(t, "5·10^6", countLabel(5_000_000))
	require.Equal(t, "1234", countLabel(1234))
}

// TestCompareInterleaves: repetitions alternate the order of the sides
// (A B, B A, A B), every side gets every repetition, and the medians are
// those of the repetitions.
func TestCompareInterleaves(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	side := func(name string, d time.Duration) sideSpec {
		return sideSpec{name, func(context.Context, int) (time.Duration, error) {
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			return d, nil
		}}
	}
	sides, err := compare(context.Background(), plan{reps: 3, clients: 1, dur: time.Hour, maxOps: 2},
		[]sideSpec{side("A", time.Millisecond), side("B", 3*time.Millisecond)})
	require.NoError(t, err)
	require.Equal(t, []string{"A", "A", "B", "B", "B", "B", "A", "A", "A", "A", "B", "B"}, order)
	require.Len(t, sides, 2)
	require.Len(t, sides[0].Runs, 3)
	require.Equal(t, 2, sides[1].Runs[0].Ops)
	require.InDelta(t, 1.0, sides[0].P50Ms, 1e-9)
	require.InDelta(t, 3.0, sides[1].P99Ms, 1e-9)
}
