package seal_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/seal"
)

// TestCleaner: the leader's runnable deletes the expired claims at once
// (those due, or claimed when not due, more than the window and an hour
// ago), keeps the others, says how many it deleted, and returns nil when
// its context ends; on a database it cannot reach it returns the error.
func TestCleaner(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	ctx := t.Context()
	_, err := pool.Exec(ctx, `
		INSERT INTO ferry_seal_run (run_id, job_id, claimed_at, due) VALUES
			('due-long-ago', 1, now(), now() - interval '3 hours'),
			('claimed-long-ago', 2, now() - interval '3 hours', NULL),
			('claimed-long-ago-due-late', 3, now() - interval '3 hours', now() + interval '1 hour'),
			('due-within', 4, now() - interval '3 hours', now() - interval '90 minutes'),
			('claimed-now', 5, now(), NULL)`)
	require.NoError(t, err)

	var rec logtest.Recorder
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- seal.Cleaner(pool, time.Hour, rec.Logger())(runCtx) }()

	// Its first pass comes at once; a runnable that returns first (an
	// error) says why here rather than by a wait running out.
	for deadline := time.Now().Add(30 * time.Second); len(rec.All("seal: expired run id claims deleted")) == 0; {
		select {
		case err := <-done:
			t.Fatalf("the cleaner returned before it deleted a claim: %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("no claim deleted")
		}
	}
	require.EqualValues(t, 2, rec.Find(t, "seal: expired run id claims deleted")["count"])
	rows, err := pool.Query(ctx, `SELECT run_id FROM ferry_seal_run ORDER BY job_id`)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"claimed-long-ago-due-late", "due-within", "claimed-now"}, left)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err, "a cleaner whose context ended")
	case <-time.After(30 * time.Second):
		t.Fatal("the cleaner did not return when its context ended")
	}

	closed := pgtest.PoolFor(t, url)
	closed.Close()
	require.ErrorContains(t, seal.Cleaner(closed, time.Hour, rec.Logger())(ctx), "ferry: seal: delete expired claims")
}
