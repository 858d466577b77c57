package workflow

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/jobs"
)

// The keys of a step's job metadata that ferry sets.
const (
	// MetadataWorkflow is the workflow's id.
	MetadataWorkflow = "ferry_workflow"
	// MetadataStep is the step's name.
	MetadataStep = "ferry_step"
	// MetadataReadyAt is when the step's last dependency released it (RFC
	// 3339); absent for a step that had none.
	MetadataReadyAt = "ferry_ready_at"
)

// LockNamespace is the first int of the transaction advisory lock
// (LockNamespace, hashtext(workflow id)) that every change to a workflow's
// steps holds: shared by the trigger that finishes a step, exclusive for
// AddTx, CancelTx and RetryTx.
const LockNamespace = 911000006

// SettleNamespace is the first int of the transaction advisory lock
// (SettleNamespace, hashtext(workflow id)) under which a transaction that
// ended a step looks, at its commit, whether the workflow has ended.
const SettleNamespace = 911000007

// Inserter inserts a workflow's jobs: a *jobs.Inserter in a service, or,
// in a worker, the River client of the job's context
// (river.ClientFromContext[pgx.Tx](ctx)), so that the jobs get the insert
// middleware of either (unique keys, seals, trace context).
type Inserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// DB is what the reading functions query: a *pgxpool.Pool, a *pgx.Conn or
// a pgx.Tx, whose search_path finds ferry's tables (FERRY_SCHEMA's).
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Result is an inserted workflow.
type Result struct {
	// ID is the workflow's id: Workflow.ID, or the one InsertTx made.
	ID string
	// Existing says that a workflow with this ID was there already:
	// nothing was inserted.
	Existing bool
	// Jobs maps each step's name to its job's id.
	Jobs map[string]int64
}

// InsertTx inserts w in tx: the workflow, every step's job and their
// dependencies, all of them or none (they exist if and only if tx
// commits). A step without dependencies is available at once; the others
// wait in River's pending state, which River never fetches, until the
// transaction that completes their last dependency releases them. w is
// checked first (Validate); a workflow whose ID exists already is
// returned as it is, with Existing set.
func InsertTx(ctx context.Context, tx pgx.Tx, ins Inserter, w *Workflow) (*Result, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	id := w.ID
	if id == "" {
		id = NewID()
	}
	var created bool
	err := tx.QueryRow(ctx, `INSERT INTO ferry_workflow (id, name) VALUES ($1, $2)
ON CONFLICT (id) DO NOTHING RETURNING true`, id, w.Name).Scan(&created)
	if errors.Is(err, pgx.ErrNoRows) {
		jobs, err := stepJobs(ctx, tx, id)
		if err != nil {
			return nil, err
		}
		return &Result{ID: id, Existing: true, Jobs: jobs}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
	}
	ord, _ := order(w.steps, w.index) // Validate found no cycle
	plan := make([]planned, len(ord))
	for k, i := range ord {
		s := w.steps[i]
		plan[k] = planned{step: s, waiting: len(s.DependsOn)}
		for _, d := range s.DependsOn {
			plan[k].deps = append(plan[k].deps, edge{on: d})
		}
	}
	jobs, err := insertSteps(ctx, tx, ins, id, "", plan)
	if err != nil {
		return nil, err
	}
	return &Result{ID: id, Jobs: jobs}, nil
}

// planned is a step about to be inserted: how many dependencies it waits
// for, its edges, whether a failed dependency cancels it at once.
type planned struct {
	step    Step
	waiting int
	deps    []edge
	doomed  string // a dependency that failed already: the step is cancelled
}

// edge is a dependency on the step on: one of the same insert, or one
// that exists (onJob, its job).
type edge struct {
	on    string
	onJob int64
}

// copyAt is the number of steps from which a *jobs.Inserter inserts a
// workflow's jobs with COPY (jobs.Inserter.EncodeCopy and CopyTx: the
// rows River's InsertManyFastTx writes, insert middleware included)
// instead of River's InsertManyTx, which returns every job row.
const copyAt = 100

// insertSteps inserts the jobs of plan (in its order, so that a step's job
// id is above its dependencies'), their steps and their edges.
func insertSteps(ctx context.Context, tx pgx.Tx, ins Inserter, id, addedBy string, plan []planned) (map[string]int64, error) {
	params := make([]river.InsertManyParams, len(plan))
	for k, p := range plan {
		opts, err := stepOpts(id, p)
		if err != nil {
			return nil, err
		}
		params[k] = river.InsertManyParams{Args: p.step.Args, InsertOpts: opts}
	}
	jobIDs, err := insertJobs(ctx, tx, ins, id, plan, params)
	if err != nil {
		return nil, err
	}
	var (
		jobs     = make(map[string]int64, len(plan))
		steps    = make([][]any, len(plan))
		deps     [][]any
		doomed   []int64
		doomedBy string
		added    *string
	)
	if addedBy != "" {
		added = &addedBy
	}
	for k, p := range plan {
		var after *string
		if p.step.AfterAllAddedBy != "" {
			after = &p.step.AfterAllAddedBy
		}
		steps[k] = []any{id, p.step.Name, jobIDs[k], cmp.Or(p.step.mode, "all"), p.step.IgnoreFailedDeps, int32(p.waiting), added, after} //nolint:gosec // at most MaxSteps
		jobs[p.step.Name] = jobIDs[k]
		for _, e := range p.deps {
			on, ok := jobs[e.on]
			if !ok {
				on = e.onJob
			}
			deps = append(deps, []any{on, jobIDs[k]})
		}
		if p.doomed != "" {
			doomed, doomedBy = append(doomed, jobIDs[k]), p.doomed
		}
	}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ferry_workflow_step"},
		[]string{"workflow_id", "name", "job_id", "mode", "ignore_failed_deps", "waiting", "added_by", "after_added_by"},
		pgx.CopyFromRows(steps)); err != nil {
		return nil, fmt.Errorf("workflow: insert %s: steps: %w", id, err)
	}
	if len(deps) > 0 {
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"ferry_workflow_dep"},
			[]string{"depends_on", "step"}, pgx.CopyFromRows(deps)); err != nil {
			return nil, fmt.Errorf("workflow: insert %s: dependencies: %w", id, err)
		}
	}
	if len(doomed) > 0 {
		slices.Sort(doomed)
		if _, err := tx.Exec(ctx, `SELECT ferry_workflow_cancel($1, 'dependency', $2, false)`, doomed,
			fmt.Sprintf("workflow: not run: dependency %s had failed when the step was added", doomedBy)); err != nil {
			return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
		}
	}
	return jobs, nil
}

// insertJobs inserts the steps' jobs and returns their ids, in plan's
// order.
func insertJobs(ctx context.Context, tx pgx.Tx, ins Inserter, id string, plan []planned, params []river.InsertManyParams) ([]int64, error) {
	ids := make([]int64, len(plan))
	if ji, ok := ins.(*jobs.Inserter); ok && len(plan) >= copyAt {
		// COPY returns no ids: the jobs are found again by the workflow's
		// id in their metadata, among the ids taken after a mark taken
		// first (the sequence only grows; other transactions' jobs in the
		// range are told apart by the id).
		var mark int64
		if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('river_job', 'id'))`).Scan(&mark); err != nil {
			return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
		}
		rows, err := ji.EncodeCopy(ctx, time.Now(), params)
		if err != nil {
			return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
		}
		var b jobs.CopyBatch
		for _, r := range rows {
			b.Add(r)
		}
		if _, err := ji.CopyTx(ctx, tx, &b); err != nil {
			return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
		}
		at := make(map[string]int, len(plan))
		for k, p := range plan {
			at[p.step.Name] = k
		}
		found := 0
		q, _ := tx.Query(ctx, `SELECT id, metadata->>'ferry_step' FROM river_job
WHERE id > $1 AND metadata->>'ferry_workflow' = $2`, mark, id)
		var (
			jobID int64
			name  string
		)
		if _, err := pgx.ForEachRow(q, []any{&jobID, &name}, func() error {
			if k, ok := at[name]; ok {
				ids[k] = jobID
				found++
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
		}
		if found != len(plan) {
			return nil, fmt.Errorf("workflow: insert %s: %d jobs found after COPY for %d steps", id, found, len(plan))
		}
		return ids, nil
	}
	res, err := ins.InsertManyTx(ctx, tx, params)
	if err != nil {
		return nil, fmt.Errorf("workflow: insert %s: %w", id, err)
	}
	if len(res) != len(plan) {
		return nil, fmt.Errorf("workflow: insert %s: %d jobs inserted for %d steps", id, len(res), len(plan))
	}
	for k, r := range res {
		if r.UniqueSkippedAsDuplicate {
			return nil, fmt.Errorf("workflow: insert %s: step %q: its job was skipped as a duplicate by a unique key", id, plan[k].step.Name)
		}
		ids[k] = r.Job.ID
	}
	return ids, nil
}

// stepOpts is the step's insert options: its own (or its args'), pending
// while it waits, with the workflow's keys in the metadata.
func stepOpts(id string, p planned) (*river.InsertOpts, error) {
	var opts river.InsertOpts
	switch {
	case p.step.Opts != nil:
		opts = *p.step.Opts
	default:
		if wo, ok := p.step.Args.(river.JobArgsWithInsertOpts); ok {
			opts = wo.InsertOpts()
		}
	}
	meta := map[string]any{}
	if len(opts.Metadata) > 0 {
		if err := json.Unmarshal(opts.Metadata, &meta); err != nil {
			return nil, &StepError{Step: p.step.Name, Err: "InsertOpts.Metadata is not a JSON object: " + err.Error()}
		}
	}
	meta[MetadataWorkflow], meta[MetadataStep] = id, p.step.Name
	b, err := json.Marshal(meta)
	if err != nil {
		return nil, &StepError{Step: p.step.Name, Err: err.Error()}
	}
	opts.Metadata = b
	opts.Pending = p.waiting > 0 || p.doomed != ""
	return &opts, nil
}

func stepJobs(ctx context.Context, db DB, id string) (map[string]int64, error) {
	rows, _ := db.Query(ctx, `SELECT name, job_id FROM ferry_workflow_step WHERE workflow_id = $1`, id)
	jobs := map[string]int64{}
	var (
		name string
		job  int64
	)
	_, err := pgx.ForEachRow(rows, []any{&name, &job}, func() error { jobs[name] = job; return nil })
	if err != nil {
		return nil, fmt.Errorf("workflow: %s: steps: %w", id, err)
	}
	return jobs, nil
}

// AddTx adds steps to the workflow of job, a step that is running, in tx
// (the step's own transaction, typically with river.JobCompleteTx): a
// fan-out found at run time, one step per file found. A new step may
// depend on the workflow's existing steps (one that completed already
// counts as done, one that failed cancels it unless it ignores failed
// dependencies) and on the other new ones. Every step that waits for
// the steps added under job's (AfterAllAddedBy, of job's step or of a step
// that added it) waits for the new ones too. ins inserts the jobs: in a
// worker, river.ClientFromContext[pgx.Tx](ctx). It returns each new step's
// job id.
func AddTx(ctx context.Context, tx pgx.Tx, ins Inserter, job *rivertype.JobRow, steps ...Step) (map[string]int64, error) {
	id, adder, ok := FromJob(job)
	if !ok {
		return nil, ErrNotAStep
	}
	if len(steps) == 0 {
		return map[string]int64{}, nil
	}
	if err := lockWorkflow(ctx, tx, id); err != nil {
		return nil, err
	}
	var state string
	var total int
	err := tx.QueryRow(ctx, `SELECT state, (SELECT count(*) FROM ferry_workflow_step WHERE workflow_id = $1)
FROM ferry_workflow WHERE id = $1`, id).Scan(&state, &total)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: workflow %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: add to %s: %w", id, err)
	}
	if state != "running" {
		return nil, fmt.Errorf("%w: workflow %s is %s: no step can be added", ErrFinished, id, state)
	}
	if total+len(steps) > MaxSteps {
		return nil, &TooManyStepsError{Steps: total + len(steps)}
	}

	// The steps the new ones name, and the new ones' names, as they are.
	index := make(map[string]int, len(steps))
	named := []string{adder}
	for i, s := range steps {
		if _, dup := index[s.Name]; dup {
			return nil, &DuplicateStepError{Step: s.Name}
		}
		index[s.Name] = i
		named = append(named, s.Name)
		named = append(named, s.DependsOn...)
	}
	type existing struct {
		outcome *string
		jobID   int64
	}
	have := map[string]existing{}
	rows, _ := tx.Query(ctx, `SELECT name, outcome, job_id FROM ferry_workflow_step
WHERE workflow_id = $1 AND name = ANY ($2)`, id, named)
	var (
		name    string
		outcome *string
		jobID   int64
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &outcome, &jobID}, func() error {
		have[name] = existing{outcome: outcome, jobID: jobID}
		return nil
	}); err != nil {
		return nil, fmt.Errorf("workflow: add to %s: %w", id, err)
	}
	for _, s := range steps {
		if _, taken := have[s.Name]; taken {
			return nil, &DuplicateStepError{Step: s.Name}
		}
	}
	if a, ok := have[adder]; !ok || a.outcome != nil {
		return nil, fmt.Errorf("%w: step %s of workflow %s has finished: only a running step adds steps", ErrFinished, adder, id)
	}
	steps = slices.Clone(steps)
	known := func(n string) bool {
		if _, ok := index[n]; ok {
			return true
		}
		_, ok := have[n]
		return ok
	}
	if err := checkSteps(steps, known); err != nil {
		return nil, err
	}
	ord, err := order(steps, index)
	if err != nil {
		return nil, err
	}

	// The fan-ins that wait for what the adder (or a step that added it)
	// adds: each waits for every new step too. A new step that depends on
	// one of them would wait for itself.
	rows, _ = tx.Query(ctx, `WITH RECURSIVE up(name, added_by) AS (
    SELECT name, added_by FROM ferry_workflow_step WHERE workflow_id = $1 AND name = $2
  UNION
    SELECT s.name, s.added_by FROM up JOIN ferry_workflow_step s ON s.workflow_id = $1 AND s.name = up.added_by
)
SELECT s.job_id FROM ferry_workflow_step s
WHERE s.workflow_id = $1 AND s.outcome IS NULL AND s.after_added_by IN (SELECT name FROM up)
ORDER BY s.job_id FOR NO KEY UPDATE OF s`, id, adder)
	fanIns, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("workflow: add to %s: %w", id, err)
	}
	if len(fanIns) > 0 {
		// The fan-ins and the steps downstream of them wait for the new
		// steps: none of these may be a new step's dependency.
		rows, _ = tx.Query(ctx, `WITH RECURSIVE down(job) AS (
    SELECT unnest($1::bigint[])
  UNION
    SELECT e.step FROM down JOIN ferry_workflow_dep e ON e.depends_on = down.job
)
SELECT s.name FROM down JOIN ferry_workflow_step s ON s.job_id = down.job`, fanIns)
		blocked, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("workflow: add to %s: %w", id, err)
		}
		if cyc := fanInCycle(steps, index, blocked); cyc != nil {
			return nil, &CycleError{Cycle: cyc}
		}
	}

	plan := make([]planned, len(ord))
	for k, i := range ord {
		s := steps[i]
		p := planned{step: s}
		for _, d := range s.DependsOn {
			e, counted := edge{on: d}, false
			if h, ok := have[d]; ok {
				e.onJob = h.jobID
				if h.outcome != nil {
					switch {
					case *h.outcome == "completed" || s.IgnoreFailedDeps:
						counted = true
					case p.doomed == "":
						p.doomed = d
					}
				}
			}
			if !counted {
				p.waiting++
			}
			p.deps = append(p.deps, e)
		}
		plan[k] = p
	}
	jobs, err := insertSteps(ctx, tx, ins, id, adder, plan)
	if err != nil {
		return nil, err
	}
	if len(fanIns) > 0 {
		newJobs := slices.Sorted(maps.Values(jobs))
		if _, err := tx.Exec(ctx, `INSERT INTO ferry_workflow_dep (depends_on, step)
SELECT n, f FROM unnest($1::bigint[]) n, unnest($2::bigint[]) f`, newJobs, fanIns); err != nil {
			return nil, fmt.Errorf("workflow: add to %s: fan-in: %w", id, err)
		}
		if _, err := tx.Exec(ctx, `UPDATE ferry_workflow_step SET waiting = waiting + $2
WHERE job_id = ANY ($1)`, fanIns, len(newJobs)); err != nil {
			return nil, fmt.Errorf("workflow: add to %s: fan-in: %w", id, err)
		}
	}
	return jobs, nil
}

// fanInCycle returns a cycle when a new step depends, directly or through
// other new steps, on a step that is to wait for it (blocked: the fan-ins
// and what waits for them).
func fanInCycle(steps []Step, index map[string]int, blocked []string) []string {
	isFanIn := map[string]bool{}
	for _, f := range blocked {
		isFanIn[f] = true
	}
	var walk func(i int, path []string) []string
	seen := map[int]bool{}
	walk = func(i int, path []string) []string {
		if seen[i] {
			return nil
		}
		seen[i] = true
		path = append(path, steps[i].Name)
		for _, d := range steps[i].DependsOn {
			if isFanIn[d] {
				return append(path, d)
			}
			if j, ok := index[d]; ok {
				if c := walk(j, path); c != nil {
					return c
				}
			}
		}
		return nil
	}
	for i := range steps {
		clear(seen)
		if c := walk(i, nil); c != nil {
			return c
		}
	}
	return nil
}

func lockWorkflow(ctx context.Context, tx pgx.Tx, id string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext($2))`, LockNamespace, id); err != nil {
		return fmt.Errorf("workflow: lock %s: %w", id, err)
	}
	return nil
}

// NewID returns a new workflow id: "wf_", then the time in milliseconds
// and 64 random bits, in hex, so that ids sort by creation.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("wf_%012x%s", time.Now().UnixMilli(), hex.EncodeToString(b[:]))
}
