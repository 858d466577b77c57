package broadcast

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The guard's memory is bounded by its window: a signature is forgotten
// once its message is older than the window, when a copy is stale anyway.
func TestReplayGuard_Window(t *testing.T) {
	t.Parallel()
	g := newReplayGuard(time.Minute, 10*time.Second)
	t0 := time.Now().UnixMicro()
	minute := time.Minute.Microseconds()

	require.Empty(t, g.admit([]byte("a"), t0, t0))
	require.Equal(t, DropReplayed, g.admit([]byte("a"), t0, t0+minute), "a copy at the window's edge")
	require.Empty(t, g.admit([]byte("b"), t0+minute/2, t0+minute/2))
	require.Equal(t, DropStale, g.admit([]byte("c"), t0+minute+11e6, t0+minute), "dated past the skew")

	// Past a's window its copy is stale, and the next sweep (a quarter
	// window after the last) forgets it.
	require.Equal(t, DropStale, g.admit([]byte("a"), t0, t0+minute+1))
	later := t0 + minute + minute/4 + 1
	require.Empty(t, g.admit([]byte("d"), later, later))
	require.Len(t, g.seen, 2, "a forgotten; b and d remembered")
}
