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

// TestDeleteExpiredClaims_EachPageOnce: deleting 100,000 expired claims in
// batches reads each page of ferry_seal_run a fixed few times (Postgres 15
// counts two fetches a page for the TID range scan), besides the visit of
// each row it deletes, and not again in each later batch past the rows
// the earlier ones deleted (which stay on their pages until a vacuum):
// what a pass costs follows the table and what it deletes, not the square
// of it. Run in one transaction, in which Postgres counts the blocks of the
// table this transaction fetched (a row deleted is one more fetch of its
// block), with no flush of the counts in between.
func TestDeleteExpiredClaims_EachPageOnce(t *testing.T) {
	t.Parallel()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ctx := t.Context()
	const claims = 100_000
	_, err := pool.Exec(ctx, `
		INSERT INTO ferry_seal_run (run_id, job_id, claimed_at, due)
		SELECT 'run-' || g, g, now() - interval '10 days', now() - interval '10 days'
		FROM generate_series(1, $1) g`, claims)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `VACUUM ANALYZE ferry_seal_run`)
	require.NoError(t, err)
	var pages int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT pg_relation_size('ferry_seal_run') / current_setting('block_size')::bigint`).Scan(&pages))
	require.Positive(t, pages)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(context.WithoutCancel(ctx))
	fetched := func() int64 {
		t.Helper()
		var n int64
		require.NoError(t, tx.QueryRow(ctx, `SELECT pg_stat_get_xact_blocks_fetched('ferry_seal_run'::regclass)`).Scan(&n))
		return n
	}
	before := fetched()
	n, err := seal.DeleteExpiredClaims(ctx, tx, time.Hour)
	require.NoError(t, err)
	require.EqualValues(t, claims, n)
	read := fetched() - before - n
	t.Logf("%d claims on %d pages: %d blocks fetched besides the deletes'", claims, pages, read)
	require.Positive(t, read)
	require.LessOrEqual(t, read, 4*pages, "the batches read %d blocks besides the deletes' of a table of %d pages", read, pages)
}
