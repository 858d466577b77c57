package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
)

// TestBulkVsCopy: every round times the three ways (the enqueue runs must
// insert every line, or the step fails), records its own ratios in the
// order the rounds ran, and the ratios reported are their medians.
func TestBulkVsCopy(t *testing.T) {
	t.Chdir("../..") // the step builds ./cmd/enqueue, as from the checkout's root
	r, err := bulkVsCopy(t.Context(), pgtest.ServerURL(), 2_000, 3)
	require.NoError(t, err)
	require.Equal(t, 3, r.Rounds)
	require.Len(t, r.FileRatioRounds, 3)
	require.Len(t, r.StdinRatioRounds, 3)
	for i := range 3 {
		require.Positive(t, r.FileRatioRounds[i])
		require.Positive(t, r.StdinRatioRounds[i])
	}
	require.Equal(t, pct(r.FileRatioRounds, 50), r.FileRatio)
	require.Equal(t, pct(r.StdinRatioRounds, 50), r.StdinRatio)
	require.Positive(t, r.CopyJobsPerSec)
	require.Positive(t, r.FilePeakRSSMB)
	require.Positive(t, r.StdinPeakRSSMB)
}
