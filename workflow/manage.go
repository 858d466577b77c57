package workflow

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
)

// FromJob returns the workflow id and step name of a step's job, ok false
// for a job that is no step.
func FromJob(job *rivertype.JobRow) (workflowID, step string, ok bool) {
	if job == nil || len(job.Metadata) == 0 {
		return "", "", false
	}
	var m struct {
		Workflow string `json:"ferry_workflow"`
		Step     string `json:"ferry_step"`
	}
	if json.Unmarshal(job.Metadata, &m) != nil || m.Workflow == "" || m.Step == "" {
		return "", "", false
	}
	return m.Workflow, m.Step, true
}

// Output decodes the output that step, of the workflow of job (a step's
// job, typically the one being worked), recorded with river.RecordOutput.
// It is ErrNoOutput when that step has not completed or recorded none.
func Output[T any](ctx context.Context, db DB, job *rivertype.JobRow, step string) (T, error) {
	var out T
	id, _, ok := FromJob(job)
	if !ok {
		return out, ErrNotAStep
	}
	var (
		state *string
		raw   []byte
	)
	err := db.QueryRow(ctx, `SELECT j.state::text, j.metadata->'output'
FROM ferry_workflow_step s LEFT JOIN river_job j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND s.name = $2`, id, step).Scan(&state, &raw)
	if errors.Is(err, pgx.ErrNoRows) {
		return out, fmt.Errorf("%w: workflow %s has no step %q", ErrNotFound, id, step)
	}
	if err != nil {
		return out, fmt.Errorf("workflow: output of %s: %w", step, err)
	}
	if state == nil || *state != "completed" || raw == nil {
		return out, fmt.Errorf("%w: step %q of workflow %s (%s)", ErrNoOutput, step, id, deref(state, "deleted"))
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("workflow: output of %s: %w", step, err)
	}
	return out, nil
}

// Outputs returns the outputs of job's dependencies that completed and
// recorded one, by step name.
func Outputs(ctx context.Context, db DB, job *rivertype.JobRow) (map[string]json.RawMessage, error) {
	_, step, ok := FromJob(job)
	if !ok {
		return nil, ErrNotAStep
	}
	rows, _ := db.Query(ctx, `SELECT s.name, j.metadata->'output'
FROM ferry_workflow_dep e
JOIN ferry_workflow_step s ON s.job_id = e.depends_on
JOIN river_job j ON j.id = e.depends_on
WHERE e.step = $1 AND j.state = 'completed' AND j.metadata ? 'output'`, job.ID)
	out := map[string]json.RawMessage{}
	var (
		name string
		raw  []byte
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &raw}, func() error {
		out[name] = json.RawMessage(raw)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("workflow: outputs of %s's dependencies: %w", step, err)
	}
	return out, nil
}

// CancelTx cancels the workflow id in tx: every step not started is
// cancelled, and every running step is asked to stop (River's remote
// cancel: its context is cancelled; one that completes anyway completes).
// No step of the workflow starts after tx commits. It is ErrFinished for a
// workflow that has ended, ErrNotFound for none.
func CancelTx(ctx context.Context, tx pgx.Tx, id string) error {
	if err := lockWorkflow(ctx, tx, id); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `UPDATE ferry_workflow SET state = 'cancelled', cancelled_at = now(), finished_at = now()
WHERE id = $1 AND state = 'running'`, id)
	if err != nil {
		return fmt.Errorf("workflow: cancel %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return notRunning(ctx, tx, id)
	}
	if _, err := tx.Exec(ctx, `SELECT ferry_workflow_cancel(
    array(SELECT job_id FROM ferry_workflow_step WHERE workflow_id = $1 AND outcome IS NULL ORDER BY job_id),
    'workflow', 'workflow: cancelled', true)`, id); err != nil {
		return fmt.Errorf("workflow: cancel %s: %w", id, err)
	}
	// Running steps: as River's JobCancel (the producer working the job
	// cancels its context); read after the cancel above, so that a step a
	// fetch took meanwhile is asked too.
	if _, err := tx.Exec(ctx, `SELECT pg_notify(current_schema() || '.river_control',
    json_build_object('action', 'cancel', 'job_id', j.id, 'queue', j.queue)::text)
FROM ferry_workflow_step s JOIN river_job j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND s.outcome IS NULL AND j.state = 'running'`, id); err != nil {
		return fmt.Errorf("workflow: cancel %s: %w", id, err)
	}
	return nil
}

func notRunning(ctx context.Context, db DB, id string) error {
	var state string
	err := db.QueryRow(ctx, `SELECT state FROM ferry_workflow WHERE id = $1`, id).Scan(&state)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: workflow %s", ErrNotFound, id)
	}
	if err != nil {
		return fmt.Errorf("workflow: %s: %w", id, err)
	}
	return fmt.Errorf("%w: workflow %s is %s", ErrFinished, id, state)
}

// RetryTx runs again, in tx, the steps of workflow id that failed: the one
// named step, or (step "") every step discarded, or cancelled other than
// by ferry for a failed dependency. The steps that were cancelled because
// they failed wait again for them, and the workflow runs again; a retried
// step whose dependencies have all completed is available at once, the
// others wait. A discarded step gets one more attempt when it had used
// them all. It returns how many steps it retried.
func RetryTx(ctx context.Context, tx pgx.Tx, id, step string) (int, error) {
	if err := lockWorkflow(ctx, tx, id); err != nil {
		return 0, err
	}
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ferry_workflow WHERE id = $1)`, id).Scan(&exists); err != nil {
		return 0, fmt.Errorf("workflow: retry %s: %w", id, err)
	}
	if !exists {
		return 0, fmt.Errorf("%w: workflow %s", ErrNotFound, id)
	}
	if step != "" {
		var outcome, reason *string
		err := tx.QueryRow(ctx, `SELECT outcome, cancel_reason FROM ferry_workflow_step WHERE workflow_id = $1 AND name = $2`,
			id, step).Scan(&outcome, &reason)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return 0, fmt.Errorf("%w: workflow %s has no step %q", ErrNotFound, id, step)
		case err != nil:
			return 0, fmt.Errorf("workflow: retry %s: %w", id, err)
		case outcome == nil || *outcome == "completed":
			return 0, fmt.Errorf("workflow: retry %s: step %q has not failed (%s)", id, step, deref(outcome, "not finished"))
		case *outcome == "deleted":
			return 0, fmt.Errorf("workflow: retry %s: step %q: its job was deleted", id, step)
		case reason != nil && (*reason == "dependency" || *reason == "not_needed"):
			return 0, fmt.Errorf("workflow: retry %s: step %q did not run because a dependency failed: retry that one", id, step)
		}
	}
	rows, _ := tx.Query(ctx, `WITH t AS (
    SELECT job_id FROM ferry_workflow_step
    WHERE workflow_id = $1 AND outcome IN ('discarded', 'cancelled')
      AND CASE WHEN $2 <> '' THEN name = $2
               ELSE cancel_reason IS NULL OR cancel_reason = 'workflow' END
    ORDER BY job_id
    FOR NO KEY UPDATE
)
UPDATE river_job j
SET state = 'pending', finalized_at = NULL, scheduled_at = now(),
    max_attempts = CASE WHEN j.attempt >= j.max_attempts THEN j.attempt + 1 ELSE j.max_attempts END
FROM t WHERE j.id = t.job_id AND j.state IN ('discarded', 'cancelled')
RETURNING j.id`, id, step)
	retried, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("workflow: retry %s: %w", id, err)
	}
	if len(retried) == 0 {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, `SELECT ferry_workflow_ready(
    array(SELECT job_id FROM ferry_workflow_step WHERE job_id = ANY ($1) AND waiting = 0 ORDER BY job_id),
    current_schema())`, retried); err != nil {
		return 0, fmt.Errorf("workflow: retry %s: %w", id, err)
	}
	return len(retried), nil
}

// Info is a workflow as Get and List read it.
type Info struct {
	ID          string     `json:"id"`
	Name        string     `json:"name"`
	State       string     `json:"state"` // running, completed, failed, cancelled
	CreatedAt   time.Time  `json:"created_at"`
	FinishedAt  *time.Time `json:"finished_at,omitempty"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
	// Progress counts the steps.
	Progress Progress `json:"progress"`
	// Steps are the workflow's steps in the order of their job ids (Get
	// only).
	Steps []StepInfo `json:"steps,omitempty"`
}

// Progress counts a workflow's steps.
type Progress struct {
	Steps     int `json:"steps"`
	Finished  int `json:"finished"`
	Completed int `json:"completed"`
	// Failed are the steps discarded, deleted, or cancelled on their own
	// or by the workflow's cancel.
	Failed int `json:"failed"`
	// Skipped are the steps ferry cancelled for a failed dependency, or as
	// not needed.
	Skipped int `json:"skipped"`
}

// StepInfo is one step of a workflow.
type StepInfo struct {
	Name             string     `json:"name"`
	JobID            int64      `json:"job_id"`
	Kind             string     `json:"kind"`
	Queue            string     `json:"queue"`
	State            string     `json:"state"` // the job's River state; deleted when its row is gone
	Attempt          int        `json:"attempt"`
	MaxAttempts      int        `json:"max_attempts"`
	DependsOn        []string   `json:"depends_on"`
	Waiting          int        `json:"waiting"`
	IgnoreFailedDeps bool       `json:"ignore_failed_deps,omitempty"`
	AddedBy          string     `json:"added_by,omitempty"`
	AfterAllAddedBy  string     `json:"after_all_added_by,omitempty"`
	CancelReason     string     `json:"cancel_reason,omitempty"`
	CreatedAt        *time.Time `json:"created_at,omitempty"`
	ReadyAt          *time.Time `json:"ready_at,omitempty"`
	AttemptedAt      *time.Time `json:"attempted_at,omitempty"`
	FinalizedAt      *time.Time `json:"finalized_at,omitempty"`
	// Error is the last attempt's error, if any.
	Error string `json:"error,omitempty"`
}

const infoColumns = `w.id, w.name, w.state, w.created_at, w.finished_at, w.cancelled_at,
    p.steps, p.finished, p.completed, p.failed, p.skipped`

const progressJoin = `CROSS JOIN LATERAL (
    SELECT count(*) AS steps, count(outcome) AS finished,
           count(*) FILTER (WHERE outcome = 'completed') AS completed,
           count(*) FILTER (WHERE outcome IN ('discarded', 'deleted')
               OR (outcome = 'cancelled' AND (cancel_reason IS NULL OR cancel_reason = 'workflow'))) AS failed,
           count(*) FILTER (WHERE outcome = 'cancelled' AND cancel_reason IN ('dependency', 'not_needed')) AS skipped
    FROM ferry_workflow_step s WHERE s.workflow_id = w.id) p`

func scanInfo(row pgx.Row, in *Info) error {
	return row.Scan(&in.ID, &in.Name, &in.State, &in.CreatedAt, &in.FinishedAt, &in.CancelledAt,
		&in.Progress.Steps, &in.Progress.Finished, &in.Progress.Completed, &in.Progress.Failed, &in.Progress.Skipped)
}

// Get reads the workflow id with its steps; ErrNotFound when there is none.
func Get(ctx context.Context, db DB, id string) (*Info, error) {
	var in Info
	err := scanInfo(db.QueryRow(ctx, `SELECT `+infoColumns+` FROM ferry_workflow w `+progressJoin+` WHERE w.id = $1`, id), &in)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: workflow %s", ErrNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("workflow: %s: %w", id, err)
	}
	rows, _ := db.Query(ctx, `SELECT s.name, s.job_id, coalesce(j.kind, ''), coalesce(j.queue, ''),
    coalesce(j.state::text, 'deleted'), coalesce(j.attempt, 0), coalesce(j.max_attempts, 0),
    coalesce((SELECT array_agg(d.name ORDER BY d.name) FROM ferry_workflow_dep e
              JOIN ferry_workflow_step d ON d.job_id = e.depends_on WHERE e.step = s.job_id), '{}'),
    s.waiting, s.ignore_failed_deps, coalesce(s.added_by, ''), coalesce(s.after_added_by, ''),
    coalesce(s.cancel_reason, ''), j.created_at,
    CASE WHEN j.state <> 'pending' THEN (j.metadata->>'ferry_ready_at')::timestamptz END, j.attempted_at, j.finalized_at,
    coalesce(j.errors[array_upper(j.errors, 1)]->>'error', '')
FROM ferry_workflow_step s LEFT JOIN river_job j ON j.id = s.job_id
WHERE s.workflow_id = $1 ORDER BY s.job_id`, id)
	var s StepInfo
	_, err = pgx.ForEachRow(rows, []any{&s.Name, &s.JobID, &s.Kind, &s.Queue, &s.State, &s.Attempt, &s.MaxAttempts,
		&s.DependsOn, &s.Waiting, &s.IgnoreFailedDeps, &s.AddedBy, &s.AfterAllAddedBy, &s.CancelReason,
		&s.CreatedAt, &s.ReadyAt, &s.AttemptedAt, &s.FinalizedAt, &s.Error}, func() error {
		in.Steps = append(in.Steps, s)
		s = StepInfo{}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("workflow: %s: steps: %w", id, err)
	}
	return &in, nil
}

// ListParams filters List.
type ListParams struct {
	// State is running, completed, failed or cancelled; "" lists all.
	State string
	// Limit is the most workflows returned, newest first; 0 is 100.
	Limit int
}

// States are a workflow's states.
var States = []string{"running", "completed", "failed", "cancelled"}

// List reads workflows, newest first, without their steps.
func List(ctx context.Context, db DB, p ListParams) ([]Info, error) {
	if p.State != "" && !slices.Contains(States, p.State) {
		return nil, fmt.Errorf("workflow: list: unknown state %q (one of running, completed, failed, cancelled)", p.State)
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	rows, err := db.Query(ctx, `SELECT `+infoColumns+` FROM (
    SELECT * FROM ferry_workflow WHERE $1 = '' OR state = $1 ORDER BY created_at DESC, id LIMIT $2
) w `+progressJoin+` ORDER BY w.created_at DESC, w.id`, p.State, p.Limit)
	if err != nil {
		return nil, fmt.Errorf("workflow: list: %w", err)
	}
	defer rows.Close()
	var out []Info
	for rows.Next() {
		var in Info
		if err := scanInfo(rows, &in); err != nil {
			return nil, fmt.Errorf("workflow: list: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("workflow: list: %w", err)
	}
	return out, nil
}

// Settle records the end of every running workflow none of whose steps is
// open. The commit of the transaction that ends a workflow's last step
// does it (migration 030's deferred trigger); the worker's leader calls
// Settle every second as a backstop (a workflow of an earlier version, a
// trigger disabled by hand). It returns how many workflows it settled.
func Settle(ctx context.Context, db DB) (int, error) {
	tag, err := db.Exec(ctx, `SELECT ferry_workflow_settle(w.id) FROM ferry_workflow w
WHERE w.state = 'running'
  AND NOT EXISTS (SELECT 1 FROM ferry_workflow_step s WHERE s.workflow_id = w.id AND s.outcome IS NULL)`)
	if err != nil {
		return 0, fmt.Errorf("workflow: settle: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}
