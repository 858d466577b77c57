// Package workflow runs DAGs of River jobs: steps that wait for the steps
// they depend on, fan-out and fan-in, steps added at run time, and batches
// with callbacks, inserted in the caller's transaction.
//
// # A workflow
//
// A workflow is a named DAG of steps; each step is a River job of any
// registered kind, with its args and insert options, and the names of the
// steps it depends on:
//
//	wf := workflow.New("order 1234")
//	wf.Add("charge", ChargeArgs{Order: 1234})
//	wf.Add("reserve", ReserveArgs{Order: 1234})
//	wf.Add("ship", ShipArgs{Order: 1234}, workflow.After("charge", "reserve"))
//	wf.Add("notify", NotifyArgs{Order: 1234}, workflow.After("ship"))
//	res, err := workflow.InsertTx(ctx, tx, ins, wf) // ins: a *jobs.Inserter
//
// InsertTx inserts it whole in tx, or not at all. It checks the workflow
// first and refuses it with one error of its own type: a cycle
// (*CycleError, naming it), an unknown dependency
// (*UnknownDependencyError), a duplicate step (*DuplicateStepError), no
// step (ErrEmpty), more than MaxSteps (*TooManyStepsError), a malformed
// step (*StepError). Workflow.ID makes the insert idempotent: a second
// insert with the same id returns the first workflow (Result.Existing).
//
// # How a step runs
//
// A step without dependencies is available at once. The others wait in
// River's pending state, which River never fetches, until every
// dependency has completed: the transaction that completes the last one
// (River's completer, JobCompleteTx, anything that writes river_job)
// makes the step available, by a trigger on river_job (migration 030), and
// wakes its queue's workers as an insert does. Nothing polls.
//
// A dependency that ends discarded or cancelled cancels the step and every
// step downstream of it (cancel_reason "dependency", and an error in the
// job that River UI shows), unless the step says IgnoreFailedDeps: then it
// runs once its dependencies have ended, however they ended. Retrying the
// failed step (RetryTx, `enqueue workflow retry`, or River's JobRetry)
// makes the steps it cancelled wait for it again.
//
// A step reads its dependencies' outputs, recorded with
// river.RecordOutput, with Output (typed) or Outputs.
//
// A workflow is running until every step has ended, then completed, or
// failed when a step failed on its own; CancelTx cancels it: every step
// not started is cancelled in the cancel's transaction, and the running
// ones are asked to stop, as River's JobCancel asks. No step of a
// cancelled workflow starts after the cancel commits.
//
// # Fan-out at run time
//
// A running step adds steps to its own workflow with AddTx, in its own
// transaction (one step per file it found), depending on existing steps or
// on each other. A step declared with AfterAllAddedBy("scan") waits for
// scan and for every step scan adds, and every step those add:
//
//	wf.Add("scan", ScanArgs{Dir: "/in"})
//	wf.Add("report", ReportArgs{}, workflow.AfterAllAddedBy("scan"))
//
//	// in ScanWorker.Work:
//	var steps []workflow.Step
//	for _, f := range files {
//		steps = append(steps, workflow.Step{Name: "import " + f, Args: ImportArgs{File: f}})
//	}
//	_, err := workflow.AddTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job.JobRow, steps...)
//
// # Batches
//
// A Batch is N independent jobs and callbacks: OnSuccess (every job
// completed), OnFailure (the first failure), OnFinish (every job ended).
// A callback reads the counts and ids with Summarize:
//
//	b := workflow.NewBatch("import 2026-12-07")
//	for _, f := range files {
//		b.Add(ImportArgs{File: f}, nil)
//	}
//	b.OnFinish(ImportReportArgs{}, nil)
//	res, err := workflow.InsertTx(ctx, tx, ins, b.Workflow())
//
// # Retention
//
// River's job cleaner, in a ferry worker, never deletes a step's job: a
// workflow's jobs (and their outputs) stay while it runs, however long,
// and go with it, in one transaction, once it has been finished for
// FERRY_WORKFLOW_RETENTION.
//
// # Locks
//
// Every change to a workflow's steps holds the transaction advisory lock
// (LockNamespace, hashtext(workflow id)): shared by the trigger, exclusive
// for AddTx, CancelTx and RetryTx, so none of them meets a finishing step
// half way.
package workflow
