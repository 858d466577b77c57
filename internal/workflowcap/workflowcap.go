// Package workflowcap is the worker side of workflows (package workflow, a
// library module that inserting services import): the River job cleaner
// that spares the steps of running workflows, the retention that deletes a
// finished workflow with its jobs, the eager completion of steps, the
// leader's settle (a backstop), the metrics and the console's page.
//
// Steps are released by the database (migration 030's trigger on
// river_job), on every path that finishes a job, so nothing here runs on
// a job that is no step but one look at its metadata.
package workflowcap

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/workflow"
)

// Defaults.
const (
	// DefaultRetention is how long a finished workflow is kept with its
	// jobs (FERRY_WORKFLOW_RETENTION): River's own for discarded jobs, so
	// that a failed workflow stays as long as a dead letter would.
	DefaultRetention = 7 * 24 * time.Hour
	// SettleEvery is the leader's backstop sweep of workflows whose steps
	// have all ended but whose row says running.
	SettleEvery = time.Second
	// CleanEvery is the interval between the retention's passes.
	CleanEvery = 10 * time.Minute
	// CleanBatch is the most workflows one retention transaction deletes.
	CleanBatch = 100
)

// Section is the workflows' configuration (ferry.Config's Workflow).
type Section struct {
	// Retention is how long a workflow that has ended is kept, with every
	// step's job, before it is deleted whole; negative keeps them forever.
	Retention time.Duration `env:"FERRY_WORKFLOW_RETENTION" flag:"workflow-retention" zero:"keep" default:"168h0m0s" usage:"delete a workflow that ended longer ago than this, with its steps' jobs (0 keeps them); River's job cleaner never deletes a step's job"`
}

// WithDefaults returns sec with every unset field at its default.
func (sec Section) WithDefaults() Section {
	sec.Retention = cmp.Or(sec.Retention, DefaultRetention)
	return sec
}

// Check returns what is wrong with a defaulted sec.
func (sec Section) Check() error { return retention.CheckKeep("workflow", sec.Retention) }

// Capability is the workflows' worker side.
type Capability struct {
	sec Section
	b   *capability.Build
}

// New returns the capability of sec.
func New(sec Section) *Capability { return &Capability{sec: sec} }

// Name is "workflows".
func (*Capability) Name() string { return "workflows" }

// Build records the driver whose job cleaner spares running workflows'
// steps, the leader's settle ("workflow-settle") and retention
// ("workflow-retention"), the metrics, the start-delay observation and the
// console's page.
func (c *Capability) Build(b *capability.Build) error {
	c.b = b
	if err := b.Pilot.SetDeleteBefore(DeleteBefore(b.Pool)); err != nil {
		return err
	}
	b.Leader("workflow-settle", func(ctx context.Context) error {
		return loop.Every(ctx, SettleEvery, func(ctx context.Context) error {
			n, err := workflow.Settle(ctx, b.Pool)
			if n > 0 {
				b.Logger.Debug("workflow: settled", "workflows", n)
			}
			return err
		})
	})
	if c.sec.Retention > 0 {
		b.Leader("workflow-retention", func(ctx context.Context) error {
			return loop.Every(ctx, CleanEvery, func(ctx context.Context) error {
				_, err := Clean(ctx, b.Pool, c.sec.Retention, CleanBatch, b.Logger)
				return err
			})
		})
	}
	m := newMetrics(b.Pool, b.Logger)
	if err := b.Metrics.Register(m); err != nil {
		return err
	}
	e := newEager(b.Pool, m.delay)
	if err := b.Metrics.Register(e.done); err != nil {
		return err
	}
	b.Middleware(capability.LayerObserve, e)
	b.Page(page(b.Pool))
	return nil
}

// Clean deletes the workflows that ended longer ago than keep, and whose
// every step has ended, with their steps' jobs: batch workflows per
// transaction, until none is left. It returns how many it deleted.
func Clean(ctx context.Context, pool *pgxpool.Pool, keep time.Duration, batch int, log *slog.Logger) (int, error) {
	total := 0
	for {
		tag, err := pool.Exec(ctx, `WITH w AS (
    SELECT id FROM ferry_workflow w
    WHERE state <> 'running' AND finished_at < now() - make_interval(secs => $1)
      AND NOT EXISTS (SELECT 1 FROM ferry_workflow_step s WHERE s.workflow_id = w.id AND s.outcome IS NULL)
    ORDER BY finished_at LIMIT $2
    FOR UPDATE SKIP LOCKED
), j AS (
    DELETE FROM river_job WHERE id IN (SELECT s.job_id FROM ferry_workflow_step s JOIN w ON s.workflow_id = w.id)
), e AS (
    DELETE FROM ferry_workflow_dep WHERE step IN (SELECT s.job_id FROM ferry_workflow_step s JOIN w ON s.workflow_id = w.id)
), s AS (
    DELETE FROM ferry_workflow_step WHERE workflow_id IN (SELECT id FROM w)
)
DELETE FROM ferry_workflow WHERE id IN (SELECT id FROM w)`, keep.Seconds(), batch)
		if err != nil {
			return total, fmt.Errorf("workflow retention: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n > 0 {
			log.Info("workflow retention: deleted workflows that ended long ago, with their jobs", "workflows", n, "retention", keep)
		}
		if n < batch {
			return total, nil
		}
	}
}
