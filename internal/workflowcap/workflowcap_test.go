package workflowcap_test

import (
	"context"
	"errors"
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
	running.Add("a", jobs.NoopArgs{})
	running.Add("b", jobs.NoopArgs{}, workflow.After("a"), workflow.WithOpts(&river.InsertOpts{Queue: "parked"}))
	still := insertDone(t, pool, ins, running)

	// River works them (the trigger releases each b, then ends the first
	// workflow); the running workflow's b waits in a queue nobody works.
	work(t, pool, map[int64]string{plain.Job.ID: "completed", res.Jobs["a"]: "completed", res.Jobs["b"]: "completed",
		still.Jobs["a"]: "completed", still.Jobs["b"]: "available"})
	in, err := workflow.Get(ctx, pool, res.ID)
	require.NoError(t, err)
	require.Equal(t, "completed", in.State)
	// Two days pass for the jobs, eight for the workflow's end.
	_, err = pool.Exec(ctx, `UPDATE river_job SET finalized_at = finalized_at - interval '2 days' WHERE finalized_at IS NOT NULL`)
	require.NoError(t, err)
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
	wf.Add("a", failArgs{})
	res := insertDone(t, pool, ins, wf)
	work(t, pool, map[int64]string{res.Jobs["a"]: "discarded"})
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

// failArgs is a kind whose one attempt fails: its job ends discarded.
type failArgs struct{}

func (failArgs) Kind() string { return "wfcap.fail" }

// InsertOpts gives it one attempt.
func (failArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{MaxAttempts: 1} }

type failWorker struct{ river.WorkerDefaults[failArgs] }

func (failWorker) Work(context.Context, *river.Job[failArgs]) error { return errors.New("fails") }

// work runs a River client on the default queue (no-op and failing jobs)
// until each job of want is in its state, then stops it.
func work(t *testing.T, pool *pgxpool.Pool, want map[int64]string) {
	t.Helper()
	ctx := context.Background()
	workers := river.NewWorkers()
	river.AddWorker(workers, &jobs.NoopWorker{})
	river.AddWorker(workers, failWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:       workers,
		FetchCooldown: time.Millisecond,
		TestOnly:      true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	defer func() { require.NoError(t, client.Stop(ctx)) }()
	require.Eventually(t, func() bool {
		for id, state := range want {
			j, err := client.JobGet(ctx, id)
			if err != nil || string(j.State) != state {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond, "jobs %v", want)
}
