package queuecap

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/rivershared/riverpilot"

	"github.com/ferryq/ferry/internal/pilot"
)

// Priority aging (FERRY_PRIORITY_AGING, Section.PriorityAging): River
// fetches a queue's jobs in the order of (priority, scheduled_at, id), so
// a job of priority 4 waits as long as any job of priority 1 is there to
// run. With aging, a job that has waited (since its scheduled_at) a
// period counts one priority level higher, and one more per further
// period, up to level 1: the fetch orders by (that level, scheduled_at,
// id). Under a continuous flood of priority-1 jobs that keeps every
// worker busy, a priority-4 job reaches level 1 after three periods, and
// is then the oldest job of its level: it starts next. Under a backlog of
// priority-1 jobs older than it, it waits its turn behind those, as a job
// of priority 1 would.
//
// The fetch is River's (riverpgxv5's JobGetAvailable: the same filter,
// the same claim of each job, FOR UPDATE SKIP LOCKED) but for its order:
// it reads the oldest jobs of each of River's four priorities (each along
// River's fetch index, 2 × the jobs asked for), orders them by their aged
// level, and claims as many as asked for; the claimed rows are then read
// back through River's own executor (JobGetByIDMany), so that River
// decodes them as it does its own. TestAging_RiverFetchUnchanged fails
// when River's fetch changes, so that this one never silently drifts
// from it. Without aging, River's own fetch runs, unchanged.
//
// What it costs: two statements per fetch instead of one, and four short
// index scans instead of one.

// agingFetch is the fetch of priority aging by period.
func agingFetch(pool *pgxpool.Pool, period time.Duration) pilot.GetAvailable {
	secs := period.Seconds()
	return func(ctx context.Context, exec riverdriver.Executor, _ riverpilot.ProducerState, params *riverdriver.JobGetAvailableParams) (*riverdriver.JobGetAvailableResult, error) {
		table := "river_job"
		if params.Schema != "" {
			table = pgx.Identifier{params.Schema, "river_job"}.Sanitize()
		}
		var ids []int64
		err := pool.QueryRow(ctx, fmt.Sprintf(agingSQL, table, table, table),
			params.Queue, params.Kind, params.Now, int32(min(params.MaxToLock, math.MaxInt32)), //nolint:gosec // bounded
			params.ClientID, int32(min(params.MaxAttemptedBy, math.MaxInt32)), secs).Scan(&ids) //nolint:gosec // bounded
		if err != nil {
			return nil, fmt.Errorf("ferry: fetch with priority aging: %w", err)
		}
		if len(ids) == 0 {
			return &riverdriver.JobGetAvailableResult{}, nil
		}
		rows, err := exec.JobGetByIDMany(ctx, &riverdriver.JobGetByIDManyParams{ID: ids, Schema: params.Schema})
		if err != nil {
			return nil, fmt.Errorf("ferry: fetch with priority aging: read %d claimed jobs: %w", len(ids), err)
		}
		return &riverdriver.JobGetAvailableResult{Jobs: rows}, nil
	}
}

// agingSQL: $1 queue, $2 kinds (NULL: every kind), $3 now (NULL: the
// database's), $4 jobs to claim, $5 the claiming client, $6 how many
// clients attempted_by keeps, $7 the period in seconds. The claim
// (SET ... attempted_by) is River's JobGetAvailable's.
var agingSQL = `
WITH candidates AS (
    SELECT c.id, p.priority, c.scheduled_at
    FROM (VALUES (1), (2), (3), (4)) AS p(priority)
    CROSS JOIN LATERAL (
        SELECT j.id, j.scheduled_at
        FROM %s j
        WHERE j.state = 'available'
          AND j.queue = $1::text
          AND j.priority = p.priority
          AND ($2::text[] IS NULL OR j.kind = ANY($2::text[]))
          AND j.scheduled_at <= coalesce($3::timestamptz, now())
        ORDER BY j.scheduled_at, j.id
        LIMIT 2 * $4::integer
    ) c
),
locked_jobs AS (
    SELECT j.id
    FROM candidates c
    JOIN %s j ON j.id = c.id
    WHERE j.state = 'available'
    ORDER BY greatest(1, c.priority - floor(extract(epoch FROM coalesce($3::timestamptz, now()) - c.scheduled_at) / $7::float8)),
             c.scheduled_at, c.id
    LIMIT $4::integer
    FOR UPDATE OF j SKIP LOCKED
),
claimed AS (
    UPDATE %s
    SET ` + pilot.ClaimSet("coalesce($3::timestamptz, now())", "$5", "$6") + `
    FROM locked_jobs
    WHERE river_job.id = locked_jobs.id
    RETURNING river_job.id
)
SELECT coalesce(array_agg(id ORDER BY id), '{}') FROM claimed`
