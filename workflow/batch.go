package workflow

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// The steps of a batch's callbacks.
const (
	StepOnSuccess = "on-success"
	StepOnFailure = "on-failure"
	StepOnFinish  = "on-finish"
)

// A Batch is N independent jobs and up to three callbacks: OnSuccess runs
// once every job has completed, OnFailure as soon as one has failed
// (discarded or cancelled), OnFinish once every job has ended, however.
// It is a workflow (its jobs are steps job-1 … job-N, its callbacks
// on-success, on-failure and on-finish), inserted with InsertTx
// (b.Workflow()) and seen, cancelled and retried as one; a callback reads
// the counts and job ids with Summarize.
type Batch struct {
	w    *Workflow
	jobs []string
}

// NewBatch returns an empty batch called name. Set its ID (b.Workflow().ID)
// to make its insert idempotent.
func NewBatch(name string) *Batch { return &Batch{w: New(name)} }

// Add adds a job; opts may be nil.
func (b *Batch) Add(args river.JobArgs, opts *river.InsertOpts) *Batch {
	name := "job-" + strconv.Itoa(len(b.jobs)+1)
	b.jobs = append(b.jobs, name)
	b.w.AddStep(Step{Name: name, Args: args, Opts: opts})
	return b
}

// OnSuccess runs args once every job has completed.
func (b *Batch) OnSuccess(args river.JobArgs, opts *river.InsertOpts) *Batch {
	b.w.AddStep(Step{Name: StepOnSuccess, Args: args, Opts: opts, DependsOn: slices.Clone(b.jobs)})
	return b
}

// OnFailure runs args as soon as one job has failed (discarded, or
// cancelled); when every job completes it is cancelled as not needed.
func (b *Batch) OnFailure(args river.JobArgs, opts *river.InsertOpts) *Batch {
	b.w.AddStep(Step{Name: StepOnFailure, Args: args, Opts: opts, DependsOn: slices.Clone(b.jobs), mode: "any_failed"})
	return b
}

// OnFinish runs args once every job has ended, completed or not.
func (b *Batch) OnFinish(args river.JobArgs, opts *river.InsertOpts) *Batch {
	b.w.AddStep(Step{Name: StepOnFinish, Args: args, Opts: opts, DependsOn: slices.Clone(b.jobs), IgnoreFailedDeps: true})
	return b
}

// Workflow is the batch as the workflow InsertTx inserts. Add the
// callbacks after the jobs: each waits for the jobs added before it.
func (b *Batch) Workflow() *Workflow { return b.w }

// Summary is a batch's jobs as a callback sees them.
type Summary struct {
	WorkflowID string `json:"workflow_id"`
	Jobs       int    `json:"jobs"`
	Completed  int    `json:"completed"`
	// Failed are the jobs discarded, cancelled or deleted.
	Failed int `json:"failed"`
	// Unfinished are the jobs still waiting or running (an OnFailure
	// callback runs before the others end).
	Unfinished   int     `json:"unfinished"`
	CompletedIDs []int64 `json:"completed_ids"`
	FailedIDs    []int64 `json:"failed_ids"`
}

// Summarize counts the jobs of the batch of job (a callback's job, or any
// step's), by how they ended, with their ids.
func Summarize(ctx context.Context, db DB, job *rivertype.JobRow) (*Summary, error) {
	id, _, ok := FromJob(job)
	if !ok {
		return nil, ErrNotAStep
	}
	rows, _ := db.Query(ctx, `SELECT job_id, coalesce(outcome, '') FROM ferry_workflow_step
WHERE workflow_id = $1 AND name NOT IN ($2, $3, $4) ORDER BY job_id`, id, StepOnSuccess, StepOnFailure, StepOnFinish)
	s := &Summary{WorkflowID: id, CompletedIDs: []int64{}, FailedIDs: []int64{}}
	var (
		jobID   int64
		outcome string
	)
	if _, err := pgx.ForEachRow(rows, []any{&jobID, &outcome}, func() error {
		s.Jobs++
		switch outcome {
		case "":
			s.Unfinished++
		case "completed":
			s.Completed++
			s.CompletedIDs = append(s.CompletedIDs, jobID)
		default:
			s.Failed++
			s.FailedIDs = append(s.FailedIDs, jobID)
		}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("workflow: summarize %s: %w", id, err)
	}
	return s, nil
}
