package workflowcap_test

import (
	"context"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/workflowcap"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// TestPilot_RiverDeleteParamsUnchanged fails when River's cleaner passes
// parameters the pilot's delete does not read: the delete would silently
// drift from River's (a River upgrade is then a read of River's
// JobDeleteBefore query and an update of the pilot's, not a version bump
// alone).
func TestPilot_RiverDeleteParamsUnchanged(t *testing.T) {
	t.Parallel()
	var names []string
	typ := reflect.TypeFor[riverdriver.JobDeleteBeforeParams]()
	for i := range typ.NumField() {
		names = append(names, typ.Field(i).Name)
	}
	require.Equal(t, []string{
		"CancelledDoDelete", "CancelledFinalizedAtHorizon", "CompletedDoDelete", "CompletedFinalizedAtHorizon",
		"DiscardedDoDelete", "DiscardedFinalizedAtHorizon", "Max", "QueuesExcluded", "QueuesIncluded", "Schema",
	}, names)
}

func insertDone(t *testing.T, pool *pgxpool.Pool, ins *jobs.Inserter, wf *workflow.Workflow) *workflow.Result {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // after Commit, a no-op
	res, err := workflow.InsertTx(ctx, tx, ins, wf)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	return res
}

// TestCleaner_SparesSteps runs River's own job cleaner, through the
// driver, over a database where every job finished two days ago: it
// deletes the plain job and leaves every step of the workflow; the
// workflows' retention then deletes the workflow that has ended, whole.
func TestCleaner_SparesSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)

	plain, err := ins.Client().Insert(ctx, jobs.NoopArgs{}, nil)
	require.NoError(t, err)
	wf := workflow.New("kept")
	wf.Add("a", jobs.NoopArgs{}).Add("b", jobs.NoopArgs{}, workflow.After("a"))
	res := insertDone(t, pool, ins, wf)
	running := workflow.New("running")
	running.Add("a", jobs.NoopArgs{}).Add("b", jobs.NoopArgs{}, workflow.After("a"))
	still := insertDone(t, pool, ins, running)

	// Every job completes (the trigger releases b, then ends the
	// workflow), two days ago; the running workflow's first step too.
	for _, id := range []int64{plain.Job.ID, res.Jobs["a"], res.Jobs["b"], still.Jobs["a"]} {
		_, err := pool.Exec(ctx, `UPDATE river_job SET state = 'completed', finalized_at = now() - interval '2 days', attempt = 1 WHERE id = $1`, id)
		require.NoError(t, err)
	}
	in, err := workflow.Get(ctx, pool, res.ID)
	require.NoError(t, err)
	require.Equal(t, "completed", in.State)
	_, err = pool.Exec(ctx, `UPDATE ferry_workflow SET finished_at = now() - interval '8 days' WHERE id = $1`, res.ID)
	require.NoError(t, err)

	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.NoopWorker{})
	client, err := river.NewClient[pgx.Tx](workflowcap.NewDriver(riverpgxv5.New(pool), pool), &river.Config{
		Queues:                      map[string]river.QueueConfig{"unused": {MaxWorkers: 1}},
		Workers:                     workers,
		CompletedJobRetentionPeriod: time.Hour,
		TestOnly:                    true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })

	require.Eventually(t, func() bool {
		_, err := ins.Client().JobGet(ctx, plain.Job.ID)
		return err != nil
	}, 30*time.Second, 50*time.Millisecond, "River's cleaner deleted the plain job")
	for _, id := range []int64{res.Jobs["a"], res.Jobs["b"], still.Jobs["a"]} {
		_, err := ins.Client().JobGet(ctx, id)
		require.NoError(t, err, "the cleaner spared step %d", id)
	}

	n, err := workflowcap.Clean(ctx, pool, 7*24*time.Hour, 1, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.Equal(t, 1, n, "the workflow that ended 8 days ago, and only it")
	_, err = workflow.Get(ctx, pool, res.ID)
	require.ErrorIs(t, err, workflow.ErrNotFound)
	for _, id := range []int64{res.Jobs["a"], res.Jobs["b"]} {
		_, err := ins.Client().JobGet(ctx, id)
		require.ErrorIs(t, err, river.ErrNotFound, "its job %d went with it", id)
	}
	_, err = workflow.Get(ctx, pool, still.ID)
	require.NoError(t, err, "a running workflow stays, however old its steps")
}

// TestSettle_EndsWhatTheTriggerLeft: a workflow whose steps have all
// ended but whose row says running (two transactions ended its last two
// steps at once) is ended by Settle.
func TestSettle_EndsWhatTheTriggerLeft(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)
	wf := workflow.New("w")
	wf.Add("a", jobs.NoopArgs{})
	res := insertDone(t, pool, ins, wf)
	_, err = pool.Exec(ctx, `UPDATE river_job SET state = 'discarded', finalized_at = now(), attempt = 1 WHERE id = $1`, res.Jobs["a"])
	require.NoError(t, err)
	// As if the trigger had not seen its step as the last.
	_, err = pool.Exec(ctx, `UPDATE ferry_workflow SET state = 'running', finished_at = NULL WHERE id = $1`, res.ID)
	require.NoError(t, err)
	n, err := workflow.Settle(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	in, err := workflow.Get(ctx, pool, res.ID)
	require.NoError(t, err)
	require.Equal(t, "failed", in.State)
}
