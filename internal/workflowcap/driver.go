package workflowcap

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"

	"github.com/ferryq/ferry/internal/pilot"
)

// NewDriver wraps d in a driver whose pilot's job cleaner spares every
// workflow step's job (DeleteBefore): for a River client of its own, as
// the tests run one; a ferry server sets the part on its one pilot.
func NewDriver(d riverdriver.Driver[pgx.Tx], pool *pgxpool.Pool) *pilot.Driver {
	p := &pilot.Pilot{}
	_ = p.SetDeleteBefore(DeleteBefore(pool))
	return pilot.NewDriver(d, p)
}

// DeleteBefore is River's job cleaner's delete (River's JobDeleteBefore
// query, riverpgxv5's dbsqlc/river_job.sql), but for every workflow step's
// job (the workflows' retention deletes them, a workflow at a time, once
// it has ended); pool runs it. TestPilot_RiverDeleteParamsUnchanged fails
// when the cleaner's parameters change, so that the delete never silently
// drifts from River's.
func DeleteBefore(pool *pgxpool.Pool) pilot.DeleteBefore {
	return func(ctx context.Context, _ riverdriver.Executor, params *riverdriver.JobDeleteBeforeParams) (int, error) {
		table := "river_job"
		if params.Schema != "" {
			table = pgx.Identifier{params.Schema, "river_job"}.Sanitize()
		}
		tag, err := pool.Exec(ctx, `DELETE FROM `+table+` WHERE id IN (
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
}
