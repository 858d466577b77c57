package workflowcap

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/workflow"
)

type echoArgs struct {
	N int `json:"n"`
}

func (echoArgs) Kind() string { return "wfcap.echo" }

type echoWorker struct {
	river.WorkerDefaults[echoArgs]
}

func (echoWorker) Work(ctx context.Context, job *river.Job[echoArgs]) error {
	return river.RecordOutput(ctx, job.Args.N)
}

// TestEager_CompletesStepsAtOnceWithTheirOutput: with the middleware, a
// chain's steps are completed by the eager completion (not River's
// batching completer), and each keeps the output its worker recorded.
func TestEager_CompletesStepsAtOnceWithTheirOutput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil), jobs.WithSchema(""))
	require.NoError(t, err)
	e := newEager(pool, nil)
	workers := river.NewWorkers()
	river.AddWorker(workers, echoWorker{})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 4}},
		Workers:       workers,
		Middleware:    []rivertype.Middleware{e},
		FetchCooldown: time.Millisecond,
		TestOnly:      true,
	})
	require.NoError(t, err)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() { _ = client.Stop(context.WithoutCancel(ctx)) })

	wf := workflow.New("chain")
	wf.Add("0", echoArgs{N: 0})
	for i := 1; i < 5; i++ {
		wf.Add(fmt.Sprint(i), echoArgs{N: i}, workflow.After(fmt.Sprint(i-1)))
	}
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	res, err := workflow.InsertTx(ctx, tx, ins, wf)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))

	require.Eventually(t, func() bool {
		in, err := workflow.Get(ctx, pool, res.ID)
		require.NoError(t, err)
		return in.State == "completed"
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, 5.0, testutil.ToFloat64(e.done.WithLabelValues("eager")), "every step completed at once")
	last, err := client.JobGet(ctx, res.Jobs["4"])
	require.NoError(t, err)
	for i := range 4 {
		n, err := workflow.Output[int](ctx, pool, last, fmt.Sprint(i))
		require.NoError(t, err, "step %d kept its output", i)
		require.Equal(t, i, n)
	}
	require.Equal(t, []byte("4"), last.Output(), "and the last one too")
}

// Above eagerBelow steps per window the eager completion stands aside for
// River's batching completer, and comes back once the rate falls.
func TestEager_StandsAsideUnderLoad(t *testing.T) {
	e := newEager(nil, nil)
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range eagerBelow {
		require.False(t, e.busy(t0.Add(time.Duration(i)*time.Millisecond)), "step %d of a slow stream", i+1)
	}
	require.True(t, e.busy(t0.Add(eagerBelow*time.Millisecond)), "one more in the same window")
	// The next window still counts the one before it.
	require.True(t, e.busy(t0.Add(eagerWindow+time.Millisecond)))
	// Two quiet windows later the stream is slow again.
	require.False(t, e.busy(t0.Add(4*eagerWindow)))
}
