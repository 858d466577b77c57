package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry"
)

// scalePoint is ferry's worker with size finished jobs already in
// river_job: the medians of its rounds, and the medians of each round's
// ratio to the empty table's figure measured next to it.
type scalePoint struct {
	Finished        int     `json:"finished_jobs"`
	JobsPerSec      float64 `json:"jobs_per_sec"`
	PickupP50       float64 `json:"pickup_p50_ms"`
	PickupP99       float64 `json:"pickup_p99_ms"`
	ThroughputRatio float64 `json:"throughput_ratio"`
	PickupP99Ratio  float64 `json:"pickup_p99_ratio"`
}

// scaleResult is how ferry's worker holds up as river_job grows.
type scaleResult struct {
	Rounds int          `json:"scale_rounds"`
	Points []scalePoint `json:"scale_points"`
	// The ratios compare the largest table with the empty one:
	// throughput (≥ 0.8 is the target) and pickup p99 (≤ 1.5).
	ThroughputRatio float64 `json:"scale_throughput_ratio"`
	PickupP99Ratio  float64 `json:"scale_pickup_p99_ratio"`
}

// scaleRounds is how many paired rounds scaleBench runs: a round measures
// every size one after the other, so that a ratio compares figures taken
// a minute apart, not the machine's load of one minute with another's.
const scaleRounds = 3

// scaleBench measures, for each size of finished jobs in river_job, the
// rate at which ferry at its defaults works a backlog of backlog no-op
// jobs and its pickup at rate jobs/s for dur, each on a database of its
// own filled once. It runs scaleRounds rounds, each over every size (in
// turn forwards and backwards), and removes a round's jobs before the
// next; a size's ratios are the medians of its rounds' ratios to the
// empty table's figures of the same round.
func scaleBench(ctx context.Context, serverURL string, sizes []int, backlog, rate int, dur time.Duration) (scaleResult, error) {
	res := scaleResult{Rounds: scaleRounds}
	pools := make([]*pgxpool.Pool, len(sizes))
	filled := make([]int64, len(sizes))
	for i, size := range sizes {
		pool, drop, err := scratch(ctx, serverURL)
		if err != nil {
			return res, err
		}
		defer drop()
		if err := fillFinished(ctx, pool, size); err != nil {
			return res, fmt.Errorf("%d finished jobs: %w", size, err)
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM river_job`).Scan(&filled[i]); err != nil {
			return res, err
		}
		pools[i] = pool
	}
	rounds := make([][]scalePoint, len(sizes)) // by size, then round
	for round := range scaleRounds {
		order := make([]int, len(sizes))
		for i := range order {
			order[i] = i
			if round%2 == 1 {
				order[i] = len(sizes) - 1 - i
			}
		}
		for _, i := range order {
			pt, err := scaleAt(ctx, pools[i], sizes[i], backlog, rate, dur)
			if err != nil {
				return res, fmt.Errorf("%d finished jobs, round %d: %w", sizes[i], round+1, err)
			}
			// The round's jobs go: the next round finds the table filled
			// as this one did.
			if _, err := pools[i].Exec(ctx, `DELETE FROM river_job WHERE id > $1`, filled[i]); err != nil {
				return res, err
			}
			if _, err := pools[i].Exec(ctx, `VACUUM ANALYZE river_job`); err != nil {
				return res, err
			}
			rounds[i] = append(rounds[i], pt)
		}
	}
	for i, size := range sizes {
		var thr, p50, p99, thrRatio, p99Ratio []float64
		for round, pt := range rounds[i] {
			base := rounds[0][round]
			thr, p50, p99 = append(thr, pt.JobsPerSec), append(p50, pt.PickupP50), append(p99, pt.PickupP99)
			thrRatio, p99Ratio = append(thrRatio, pt.JobsPerSec/base.JobsPerSec), append(p99Ratio, pt.PickupP99/base.PickupP99)
		}
		pt := scalePoint{Finished: size}
		pt.JobsPerSec, _ = medianMax(thr)
		pt.PickupP50, _ = medianMax(p50)
		pt.PickupP99, _ = medianMax(p99)
		pt.ThroughputRatio, _ = medianMax(thrRatio)
		pt.PickupP99Ratio, _ = medianMax(p99Ratio)
		res.Points = append(res.Points, pt)
	}
	last := res.Points[len(res.Points)-1]
	res.ThroughputRatio, res.PickupP99Ratio = last.ThroughputRatio, last.PickupP99Ratio
	return res, nil
}

// scaleAt measures one round of one size on pool's database, filled
// with size finished jobs.
func scaleAt(ctx context.Context, pool *pgxpool.Pool, size, backlog, rate int, dur time.Duration) (scalePoint, error) {
	pt := scalePoint{Finished: size}
	var err error
	// The backlog, worked by ferry at its defaults.
	if pt.JobsPerSec, err = backlogRate(ctx, pool, backlog); err != nil {
		return pt, err
	}

	// Pickup at rate, on the same table (the backlog completed too).
	pt.PickupP50, pt.PickupP99, _, err = latencyOn(ctx, pool, ferry.Config{Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()}, Admin: ferry.AdminConfig{Addr: "off"}}, rate, dur)
	return pt, err
}

// backlogRate writes a backlog of n no-op jobs into pool's database and
// returns the rate at which a ferry server at its defaults works it,
// counted by its River client's completion events.
func backlogRate(ctx context.Context, pool *pgxpool.Pool, n int) (float64, error) {
	if err := backlogSettled(ctx, pool, n, nil); err != nil {
		return 0, err
	}
	return serverThroughput(ctx, ferry.Config{Logger: workerLog(), Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()}, Admin: ferry.AdminConfig{Addr: "off"}}, n)
}

// fillFinished writes n finished jobs (in three queues, 1 in 100
// discarded, finished over the last day, so that River's cleaner keeps
// them) and analyzes the table.
func fillFinished(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if n > 0 {
		if _, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, attempted_at, scheduled_at, finalized_at)
			SELECT '{}', 'ferry.noop', 25, (ARRAY['default', 'reports', 'mail'])[g % 3 + 1],
				CASE WHEN g % 100 = 0 THEN 'discarded' ELSE 'completed' END::river_job_state,
				1, now() - (g % 86400) * interval '1 second', now() - (g % 86400) * interval '1 second', now() - (g % 86400) * interval '1 second'
			FROM generate_series(1, $1) g`, n); err != nil {
			return fmt.Errorf("fill river_job: %w", err)
		}
	}
	_, err := pool.Exec(ctx, "VACUUM ANALYZE river_job")
	return err
}
