package periodic

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Row is one schedule as ferry_schedule records it, with the state of its
// last job.
type Row struct {
	ID           string     `json:"id"`
	Name         string     `json:"name"`
	Trigger      string     `json:"trigger"`
	Zone         string     `json:"zone"`
	Kind         string     `json:"kind"`
	Queue        string     `json:"queue"`
	NextRunAt    *time.Time `json:"next_run_at"`
	LastTickAt   *time.Time `json:"last_tick_at"`
	LastStatus   *string    `json:"last_status"`
	LastJobID    *int64     `json:"last_job_id"`
	LastJobState *string    `json:"last_job_state"`
	UpdatedAt    time.Time  `json:"updated_at"`
}

// Querier is what List runs on (a pool, a connection, a tx).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// List reads ferry_schedule, ordered by id.
func List(ctx context.Context, q Querier) ([]Row, error) {
	rows, err := q.Query(ctx, `SELECT s.id, s.name, s.trigger, s.zone, s.kind, s.queue, s.next_run_at, s.last_tick_at,
		s.last_status, s.last_job_id, j.state::text, s.updated_at
		FROM ferry_schedule s LEFT JOIN river_job j ON j.id = s.last_job_id ORDER BY s.id`)
	if err != nil {
		return nil, fmt.Errorf("periodic: list schedules: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Row])
	if err != nil {
		return nil, fmt.Errorf("periodic: list schedules: %w", err)
	}
	return out, nil
}
