package seal

import (
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/pgtest"
)

// TestClaimer_Concurrent: claims made at once, in batches, give each run id
// to exactly one job, the same one every caller is told, and the holder's
// own claim again returns itself.
func TestClaimer_Concurrent(t *testing.T) {
	t.Parallel()
	c := &claimer{db: pgtest.Pool(t)}
	const runs, copies = 50, 4
	owners := make([][]int64, runs)
	var wg sync.WaitGroup
	for i := range runs {
		owners[i] = make([]int64, copies)
		for j := range copies {
			wg.Go(func() {
				owner, err := c.claim(t.Context(), fmt.Sprintf("%s-run-%d", t.Name(), i), int64(i*copies+j+1))
				require.NoError(t, err)
				owners[i][j] = owner
			})
		}
	}
	wg.Wait()
	for i := range runs {
		holder := owners[i][0]
		require.GreaterOrEqual(t, holder, int64(i*copies+1))
		require.LessOrEqual(t, holder, int64(i*copies+copies))
		for j := range copies {
			require.Equal(t, holder, owners[i][j], "run %d: every claimant is told one holder", i)
		}
		again, err := c.claim(t.Context(), fmt.Sprintf("%s-run-%d", t.Name(), i), holder)
		require.NoError(t, err)
		require.Equal(t, holder, again)
	}
	var n int
	require.NoError(t, c.db.QueryRow(t.Context(), `SELECT count(*) FROM ferry_seal_run WHERE run_id LIKE $1`, t.Name()+"-run-%").Scan(&n))
	require.Equal(t, runs, n)
}
