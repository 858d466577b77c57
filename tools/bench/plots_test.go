package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The pictures are SVG files with their titles and series; without data
// there is no picture, but an error.
func TestPlots(t *testing.T) {
	dir := t.TempDir()
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, name))
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(string(b), "<?xml"), "%s is not SVG", name)
		return string(b)
	}

	require.NoError(t, plotScale(scaleResult{Points: []scalePoint{
		{Finished: 0, JobsPerSec: 12000, PickupP99: 14, ThroughputRatio: 1, PickupP99Ratio: 1},
		{Finished: 5_000_000, JobsPerSec: 11000, PickupP99: 19, ThroughputRatio: 0.92, PickupP99Ratio: 1.36},
	}}, dir))
	require.Contains(t, read("scale.svg"), "backlog throughput (target ≥ 0.8)")

	require.NoError(t, plotPickup([]pickupPoint{{Rate: 100, P50: 4, P90: 6, P99: 9}, {Rate: 500, P50: 6, P90: 9, P99: 14}}, dir))
	require.Contains(t, read("pickup.svg"), "p99")

	require.NoError(t, plotFailover(failoverResult{TickMS: 1000, CrashMS: []float64{1499, 1505}, PartitionMS: []float64{4335}}, dir))
	svg := read("failover.svg")
	require.Contains(t, svg, "kill -9")
	require.NotContains(t, svg, "graceful stop", "a fault without trials has no column")

	require.Error(t, plotScale(scaleResult{}, dir))
	require.Error(t, plotPickup(nil, dir))
	require.Error(t, plotFailover(failoverResult{}, dir))
}
