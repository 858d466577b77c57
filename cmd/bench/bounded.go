package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// boundedResult is what the bounded mode measures: inserts through
// jobs.Inserter (one job per transaction, from several goroutines) and bulk
// inserts (COPY in chunks in one transaction, as `enqueue bulk` does), each
// with the queue bounded, unbounded (the triggers of migration 010 return
// at once), and without those triggers at all. Best of rounds, the three
// variants interleaved in each round.
type boundedResult struct {
	Jobs                       int     `json:"jobs"`
	Rounds                     int     `json:"rounds"`
	InsertBoundedPerSec        float64 `json:"insert_bounded_per_sec"`
	InsertUnboundedPerSec      float64 `json:"insert_unbounded_per_sec"`
	InsertNoTriggersPerSec     float64 `json:"insert_no_triggers_per_sec"`
	BulkBoundedPerSec          float64 `json:"bulk_bounded_per_sec"`
	BulkUnboundedPerSec        float64 `json:"bulk_unbounded_per_sec"`
	BulkNoTriggersPerSec       float64 `json:"bulk_no_triggers_per_sec"`
	BoundedInsertRatio         float64 `json:"bounded_insert_ratio"`
	BoundedBulkRatio           float64 `json:"bounded_bulk_ratio"`
	UnboundedTriggerInsertCost float64 `json:"unbounded_trigger_insert_ratio"`
	UnboundedTriggerBulkCost   float64 `json:"unbounded_trigger_bulk_ratio"`
}

type boundVariant int

const (
	variantNoTriggers boundVariant = iota
	variantUnbounded
	variantBounded
)

// boundedBench measures n jobs per variant and round.
func boundedBench(ctx context.Context, serverURL string, n, rounds int) (boundedResult, error) {
	r := boundedResult{Jobs: n, Rounds: rounds}
	best := func(cur *float64, v float64) { *cur = max(*cur, v) }
	for range rounds {
		for _, v := range []boundVariant{variantNoTriggers, variantUnbounded, variantBounded} {
			ins, bulk, err := boundedOnce(ctx, serverURL, n, v)
			if err != nil {
				return r, err
			}
			switch v {
			case variantNoTriggers:
				best(&r.InsertNoTriggersPerSec, ins)
				best(&r.BulkNoTriggersPerSec, bulk)
			case variantUnbounded:
				best(&r.InsertUnboundedPerSec, ins)
				best(&r.BulkUnboundedPerSec, bulk)
			case variantBounded:
				best(&r.InsertBoundedPerSec, ins)
				best(&r.BulkBoundedPerSec, bulk)
			}
		}
	}
	r.BoundedInsertRatio = r.InsertBoundedPerSec / r.InsertUnboundedPerSec
	r.BoundedBulkRatio = r.BulkBoundedPerSec / r.BulkUnboundedPerSec
	r.UnboundedTriggerInsertCost = r.InsertUnboundedPerSec / r.InsertNoTriggersPerSec
	r.UnboundedTriggerBulkCost = r.BulkUnboundedPerSec / r.BulkNoTriggersPerSec
	return r, nil
}

// boundedOnce measures one variant on a scratch database of its own.
func boundedOnce(ctx context.Context, serverURL string, n int, v boundVariant) (insertRate, bulkRate float64, err error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return 0, 0, err
	}
	defer drop()
	const queue = "bench"
	switch v {
	case variantNoTriggers:
		if _, err := pool.Exec(ctx, `DROP TRIGGER ferry_queue_insert ON river_job;
			DROP TRIGGER ferry_queue_update ON river_job; DROP TRIGGER ferry_queue_delete ON river_job`); err != nil {
			return 0, 0, err
		}
	case variantBounded:
		// Bound far above what the bench inserts: every insert is counted
		// and checked, none refused.
		if _, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: queue, MaxLength: 100 * int64(n)}}); err != nil {
			return 0, 0, err
		}
	}
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	if err != nil {
		return 0, 0, err
	}
	opts := &river.InsertOpts{Queue: queue}

	// One job per transaction, as a service inserts, from 8 goroutines.
	const goroutines = 8
	start := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		werr error
	)
	for g := range goroutines {
		wg.Go(func() {
			for i := g; i < n; i += goroutines {
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					_, err := ins.InsertTx(ctx, tx, jobs.NoopArgs{}, opts)
					return err
				})
				if err != nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if werr != nil {
		return 0, 0, werr
	}
	insertRate = float64(n) / time.Since(start).Seconds()

	// Bulk: 10 × n jobs, COPY in chunks of 10,000 in one transaction.
	bulkN := 10 * n
	params := make([]river.InsertManyParams, 10_000)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: opts}
	}
	start = time.Now()
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for done := 0; done < bulkN; done += len(params) {
			if _, err := ins.Client().InsertManyFastTx(ctx, tx, params[:min(len(params), bulkN-done)]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("bulk: %w", err)
	}
	bulkRate = float64(bulkN) / time.Since(start).Seconds()
	return insertRate, bulkRate, checkCount(ctx, pool, queue, n+bulkN)
}

func checkCount(ctx context.Context, pool *pgxpool.Pool, queue string, want int) error {
	var got int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE queue = $1`, queue).Scan(&got); err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("inserted %d jobs, want %d", got, want)
	}
	return nil
}
