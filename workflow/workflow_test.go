package workflow_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/workflow"
)

func order() *workflow.Workflow {
	wf := workflow.New("order 1234")
	wf.Add("charge", stepArgs{Name: "charge"})
	wf.Add("reserve", stepArgs{Name: "reserve"})
	wf.Add("ship", stepArgs{Name: "ship"}, workflow.After("charge", "reserve"))
	wf.Add("notify", stepArgs{Name: "notify"}, workflow.After("ship"))
	return wf
}

func TestValidate_OneTypedErrorEach(t *testing.T) {
	t.Parallel()
	var cyc *workflow.CycleError
	wf := workflow.New("w").Add("a", stepArgs{}, workflow.After("c")).Add("b", stepArgs{}, workflow.After("a")).
		Add("c", stepArgs{}, workflow.After("b")).Add("d", stepArgs{})
	require.ErrorAs(t, wf.Validate(), &cyc)
	require.ElementsMatch(t, []string{"a", "b", "c"}, cyc.Cycle)
	require.Contains(t, cyc.Error(), "workflow: cycle: ")

	require.ErrorAs(t, workflow.New("w").Add("a", stepArgs{}, workflow.After("a")).Validate(), &cyc)
	require.Equal(t, []string{"a"}, cyc.Cycle)

	var unknown *workflow.UnknownDependencyError
	require.ErrorAs(t, workflow.New("w").Add("a", stepArgs{}, workflow.After("x")).Validate(), &unknown)
	require.Equal(t, workflow.UnknownDependencyError{Step: "a", Dependency: "x"}, *unknown)

	var dup *workflow.DuplicateStepError
	require.ErrorAs(t, workflow.New("w").Add("a", stepArgs{}).Add("a", stepArgs{}).Validate(), &dup)
	require.Equal(t, "a", dup.Step)

	require.ErrorIs(t, workflow.New("w").Validate(), workflow.ErrEmpty)

	big := workflow.New("w")
	for i := range workflow.MaxSteps + 1 {
		big.Add(fmt.Sprint(i), stepArgs{})
	}
	var many *workflow.TooManyStepsError
	require.ErrorAs(t, big.Validate(), &many)
	require.Equal(t, workflow.MaxSteps+1, many.Steps)

	var bad *workflow.StepError
	require.ErrorAs(t, workflow.New("w").Add("", stepArgs{}).Validate(), &bad)
	require.ErrorAs(t, workflow.New("w").Add("a", nil).Validate(), &bad)
	require.Error(t, workflow.New("").Add("a", stepArgs{}).Validate())

	require.NoError(t, order().Validate())
}

func TestInsertTx_WholeOrNothingAndIdempotent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()

	// A refused workflow writes nothing.
	err := h.tx(func(tx pgx.Tx) error {
		_, err := workflow.InsertTx(ctx, tx, h.ins, workflow.New("w").Add("a", stepArgs{}, workflow.After("zz")))
		return err
	})
	var unknown *workflow.UnknownDependencyError
	require.ErrorAs(t, err, &unknown)

	// Rolled back, nothing is left.
	wf := order()
	wf.ID = "order-rolled-back"
	tx, err := h.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = workflow.InsertTx(ctx, tx, h.ins, wf)
	require.NoError(t, err)
	require.NoError(t, tx.Rollback(ctx))
	_, err = workflow.Get(ctx, h.pool, "order-rolled-back")
	require.ErrorIs(t, err, workflow.ErrNotFound)

	// Inserted twice with one id: one workflow.
	wf = order()
	wf.ID = "order-once"
	first := h.insert(wf)
	require.False(t, first.Existing)
	require.Len(t, first.Jobs, 4)
	wf = order()
	wf.ID = "order-once"
	again := h.insert(wf)
	require.True(t, again.Existing)
	require.Equal(t, first.Jobs, again.Jobs)

	// Steps wait in pending; the ones without dependencies do not.
	in := h.wait("order-once", "completed")
	require.Len(t, in.Steps, 4)
	h.noEarlyStarts()
	require.Equal(t, workflow.Progress{Steps: 4, Finished: 4, Completed: 4}, in.Progress)
	for _, s := range in.Steps {
		if s.Name == "ship" || s.Name == "notify" {
			require.NotNil(t, s.ReadyAt, "%s was released by its last dependency", s.Name)
		}
	}
	h.startedBefore("notify", "ship")
	h.startedBefore("ship", "charge", "reserve")
}

func TestFailure_CancelsDownstreamAndRetryReopens(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	h.failing["charge"] = true

	wf := workflow.New("order")
	wf.ID = "order-fails"
	wf.Add("charge", stepArgs{Name: "charge", Fail: true})
	wf.Add("reserve", stepArgs{Name: "reserve"})
	wf.Add("ship", stepArgs{Name: "ship"}, workflow.After("charge", "reserve"))
	wf.Add("notify", stepArgs{Name: "notify"}, workflow.After("ship"))
	wf.Add("audit", stepArgs{Name: "audit"}, workflow.After("ship"), workflow.IgnoreFailedDeps())
	h.insert(wf)

	in := h.wait("order-fails", "failed")
	h.noEarlyStarts()
	states := stepStates(in)
	require.Equal(t, map[string]string{
		"charge": "discarded", "reserve": "completed",
		"ship": "cancelled", "notify": "cancelled", "audit": "completed",
	}, states)
	for _, s := range in.Steps {
		switch s.Name {
		case "ship", "notify":
			require.Equal(t, "dependency", s.CancelReason)
			require.Contains(t, s.Error, "workflow: not run: dependency")
			require.Zero(t, s.Attempt, "%s never ran", s.Name)
		}
	}
	require.Equal(t, workflow.Progress{Steps: 5, Finished: 5, Completed: 2, Failed: 1, Skipped: 2}, in.Progress)

	// A cancelled-for-a-dependency step is not retried on its own.
	err := h.tx(func(tx pgx.Tx) error { _, err := workflow.RetryTx(ctx, tx, "order-fails", "ship"); return err })
	require.ErrorContains(t, err, "retry that one")

	// The failed step retried: what it cancelled waits for it again, and
	// the workflow completes.
	h.mu.Lock()
	h.failing["charge"] = false
	h.mu.Unlock()
	var n int
	require.NoError(t, h.tx(func(tx pgx.Tx) error {
		var err error
		n, err = workflow.RetryTx(ctx, tx, "order-fails", "")
		return err
	}))
	require.Equal(t, 1, n)
	in = h.wait("order-fails", "completed")
	h.noEarlyStarts()
	for _, s := range in.Steps {
		if s.Name == "audit" {
			require.Equal(t, 1, s.Attempt, "audit had run; it does not run again")
			continue
		}
		require.Equal(t, "completed", s.State, s.Name)
	}
}

func TestCancelTx_NothingStartsAfter(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()

	wf := workflow.New("long")
	wf.ID = "long"
	wf.Add("slow", stepArgs{Name: "slow", Block: true})
	wf.Add("quick", stepArgs{Name: "quick"})
	wf.Add("after-slow", stepArgs{Name: "after-slow"}, workflow.After("slow"))
	wf.Add("after-quick", stepArgs{Name: "after-quick"}, workflow.After("quick", "slow"))
	h.insert(wf)
	require.Equal(t, "slow", <-h.blocking)

	require.NoError(t, h.tx(func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, "long") }))
	in := h.wait("long", "cancelled")
	require.NotNil(t, in.CancelledAt)
	require.Eventually(t, func() bool {
		in, err := workflow.Get(ctx, h.pool, "long")
		require.NoError(t, err)
		return stepStates(in)["slow"] == "cancelled"
	}, 20e9, 20e6, "the running step was asked to stop")
	in, err := workflow.Get(ctx, h.pool, "long")
	require.NoError(t, err)
	require.Equal(t, "cancelled", stepStates(in)["after-slow"])
	require.Equal(t, "cancelled", stepStates(in)["after-quick"])
	h.mu.Lock()
	require.NotContains(t, h.started, "after-slow")
	require.NotContains(t, h.started, "after-quick")
	h.mu.Unlock()

	// Cancelled twice: the second says so.
	err = h.tx(func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, "long") })
	require.ErrorIs(t, err, workflow.ErrFinished)
	err = h.tx(func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, "nope") })
	require.ErrorIs(t, err, workflow.ErrNotFound)

	// Retried, the cancelled workflow runs again to the end.
	require.NoError(t, h.tx(func(tx pgx.Tx) error {
		_, err := workflow.RetryTx(ctx, tx, "long", "")
		return err
	}))
	require.Equal(t, "slow", <-h.blocking)
	require.NoError(t, h.tx(func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, "long") }))
	h.wait("long", "cancelled")
	h.noEarlyStarts()
}

func TestAddTx_FanOutAndFanIn(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()

	wf := workflow.New("import")
	wf.ID = "import"
	wf.Add("scan", stepArgs{Name: "scan", Add: []string{"file-1", "file-2", "file-3"}})
	wf.Add("report", stepArgs{Name: "report"}, workflow.AfterAllAddedBy("scan"))
	h.insert(wf)

	in := h.wait("import", "completed")
	h.noEarlyStarts()
	require.Len(t, in.Steps, 5)
	h.startedBefore("report", "file-1", "file-2", "file-3")
	for _, s := range in.Steps {
		if s.Name == "report" {
			require.ElementsMatch(t, []string{"file-1", "file-2", "file-3", "scan"}, s.DependsOn)
		}
		if s.Name == "file-1" {
			require.Equal(t, "scan", s.AddedBy)
		}
	}

	// A step that is not running adds nothing.
	err := h.tx(func(tx pgx.Tx) error {
		job, err := h.ins.Client().JobGetTx(ctx, tx, in.Steps[0].JobID)
		if err != nil {
			return err
		}
		_, err = workflow.AddTx(ctx, tx, h.ins, job, workflow.Step{Name: "late", Args: stepArgs{Name: "late"}})
		return err
	})
	require.ErrorIs(t, err, workflow.ErrFinished)
}

func TestAddTx_Nested(t *testing.T) {
	t.Parallel()
	h := newHarness(t)

	// scan adds dir-1 and dir-2, which add two files each; report waits
	// for every one of them, added under scan at any depth.
	wf := workflow.New("tree")
	wf.ID = "tree"
	wf.Add("scan", stepArgs{Name: "scan", Add: []string{"dir-1", "dir-2"},
		Nested: map[string][]string{"dir-1": {"f-1", "f-2"}, "dir-2": {"f-3", "f-4"}}})
	wf.Add("report", stepArgs{Name: "report"}, workflow.AfterAllAddedBy("scan"))
	h.insert(wf)
	in := h.wait("tree", "completed")
	h.noEarlyStarts()
	require.Len(t, in.Steps, 8)
	h.startedBefore("report", "dir-1", "dir-2", "f-1", "f-2", "f-3", "f-4")
	for _, s := range in.Steps {
		switch s.Name {
		case "report":
			require.ElementsMatch(t, []string{"scan", "dir-1", "dir-2", "f-1", "f-2", "f-3", "f-4"}, s.DependsOn)
		case "f-3":
			require.Equal(t, "dir-2", s.AddedBy)
		}
	}
}

func TestBatch_Callbacks(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	h.failing["bad"] = true

	ok := workflow.NewBatch("all good")
	ok.Workflow().ID = "batch-ok"
	for i := range 3 {
		ok.Add(stepArgs{Name: fmt.Sprint("ok-", i)}, nil)
	}
	ok.OnSuccess(stepArgs{Name: "on-success"}, nil).OnFailure(stepArgs{Name: "on-failure"}, nil).OnFinish(stepArgs{Name: "on-finish"}, nil)
	h.insert(ok.Workflow())
	in := h.wait("batch-ok", "completed")
	states := stepStates(in)
	require.Equal(t, "completed", states["on-success"])
	require.Equal(t, "cancelled", states["on-failure"])
	require.Equal(t, "completed", states["on-finish"])

	bad := workflow.NewBatch("one fails")
	bad.Workflow().ID = "batch-bad"
	bad.Add(stepArgs{Name: "good"}, nil).Add(stepArgs{Name: "bad", Fail: true}, nil)
	bad.OnSuccess(stepArgs{Name: "on-success"}, nil).OnFailure(stepArgs{Name: "on-failure"}, nil).OnFinish(stepArgs{Name: "on-finish"}, nil)
	res := h.insert(bad.Workflow())
	in = h.wait("batch-bad", "failed")
	states = stepStates(in)
	require.Equal(t, "cancelled", states["on-success"])
	require.Equal(t, "completed", states["on-failure"])
	require.Equal(t, "completed", states["on-finish"])

	var job = mustJob(t, h, res.Jobs["on-finish"])
	sum, err := workflow.Summarize(ctx, h.pool, job)
	require.NoError(t, err)
	require.Equal(t, 2, sum.Jobs)
	require.Equal(t, 1, sum.Completed)
	require.Equal(t, 1, sum.Failed)
	require.Equal(t, []int64{res.Jobs["job-1"]}, sum.CompletedIDs)
	require.Equal(t, []int64{res.Jobs["job-2"]}, sum.FailedIDs)
}

func TestOutput_ReadsADependencysOutput(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	res := h.insert(order())
	h.wait(res.ID, "completed")
	notify := mustJob(t, h, res.Jobs["notify"])

	type out struct{ Name string }
	got, err := workflow.Output[out](ctx, h.pool, notify, "ship")
	require.NoError(t, err)
	require.Equal(t, "ship", got.Name)

	all, err := workflow.Outputs(ctx, h.pool, notify)
	require.NoError(t, err)
	require.Equal(t, []string{"ship"}, slices.Collect(maps.Keys(all)))

	_, err = workflow.Output[out](ctx, h.pool, notify, "nope")
	require.ErrorIs(t, err, workflow.ErrNotFound)
}

// TestCancelTx_RunningStepThatFailsDoesNotRunAgain: a step running when its
// workflow is cancelled, whose worker goes on (it ignores its context, or
// never heard of the cancel) and fails afterwards, is not retried: its
// retry ends cancelled.
func TestCancelTx_RunningStepThatFailsDoesNotRunAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ctx := context.Background()
	wf := workflow.New("stubborn")
	wf.ID = "stubborn"
	wf.AddStep(workflow.Step{Name: "slow", Args: stepArgs{Name: "slow", Stubborn: true}, Opts: &river.InsertOpts{MaxAttempts: 5}})
	wf.Add("after", stepArgs{Name: "after"}, workflow.After("slow"))
	h.insert(wf)
	require.Equal(t, "slow", <-h.blocking)
	require.NoError(t, h.tx(func(tx pgx.Tx) error { return workflow.CancelTx(ctx, tx, "stubborn") }))
	close(h.release)
	require.Eventually(t, func() bool {
		in, err := workflow.Get(ctx, h.pool, "stubborn")
		require.NoError(t, err)
		return stepStates(in)["slow"] == "cancelled"
	}, 20e9, 20e6, "the failed step's retry ended cancelled")
	h.mu.Lock()
	defer h.mu.Unlock()
	require.Equal(t, []string{"slow"}, slices.DeleteFunc(slices.Clone(h.started), func(s string) bool { return s != "slow" }), "it did not run again")
	require.NotContains(t, h.started, "after")
}
