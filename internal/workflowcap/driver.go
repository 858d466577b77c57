package workflowcap

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/baseservice"
	"github.com/riverqueue/river/rivershared/riverpilot"
)

// Driver is a River driver that gives River a pilot of ferry's own: River's
// standard pilot, but for its job cleaner's delete, which spares every
// workflow step's job (the workflows' retention deletes them, a workflow
// at a time, once it has ended).
//
// River plugs a pilot in through its driver (an interface River keeps
// unexported, PluginInit and PluginPilot, River Pro's way in); the pilot
// interface is River's internal API, so a River upgrade that changes it
// fails to compile here, and TestPilot_RiverDeleteParamsUnchanged fails
// when the cleaner's parameters change, so that the delete below never
// silently drifts from River's.
type Driver struct {
	riverdriver.Driver[pgx.Tx]
	pilot *pilot
}

// NewDriver wraps d; pool runs the cleaner's delete.
func NewDriver(d riverdriver.Driver[pgx.Tx], pool *pgxpool.Pool) *Driver {
	return &Driver{Driver: d, pilot: &pilot{pool: pool}}
}

// PluginInit implements River's driver plugin.
func (d *Driver) PluginInit(*baseservice.Archetype) {}

// PluginPilot implements River's driver plugin.
func (d *Driver) PluginPilot() riverpilot.Pilot { return d.pilot }

type pilot struct {
	riverpilot.StandardPilot
	pool *pgxpool.Pool
}

var _ riverpilot.PilotJobDeleter = (*pilot)(nil)

// JobDeleteBefore is River's cleaner's delete (River's JobDeleteBefore
// query, riverpgxv5's dbsqlc/river_job.sql), but for workflow steps.
func (p *pilot) JobDeleteBefore(ctx context.Context, _ riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error) {
	table := "river_job"
	if params.Schema != "" {
		table = pgx.Identifier{params.Schema, "river_job"}.Sanitize()
	}
	tag, err := p.pool.Exec(ctx, `DELETE FROM `+table+` WHERE id IN (
    SELECT id FROM `+table+`
    WHERE ((state = 'cancelled' AND $1 AND finalized_at < $2::timestamptz)
        OR (state = 'completed' AND $3 AND finalized_at < $4::timestamptz)
        OR (state = 'discarded' AND $5 AND finalized_at < $6::timestamptz))
      AND ($7::text[] IS NULL OR NOT (queue = any($7)))
      AND ($8::text[] IS NULL OR queue = any($8))
      AND NOT (metadata ? 'ferry_workflow')
    ORDER BY id
    LIMIT $9::bigint
)`, params.CancelledDoDelete, params.CancelledFinalizedAtHorizon,
		params.CompletedDoDelete, params.CompletedFinalizedAtHorizon,
		params.DiscardedDoDelete, params.DiscardedFinalizedAtHorizon,
		params.QueuesExcluded, params.QueuesIncluded, params.Max)
	if err != nil {
		return 0, fmt.Errorf("ferry: job cleaner: %w", err)
	}
	return int(tag.RowsAffected()), nil
}
