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
// at once), and without those triggers at all, each on a database of its
// own. Best of rounds, the three variants taking turns in each round.
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

// boundedBench measures n jobs per variant and round. The three databases
// are made first and the variants take turns in each round, so that none
// runs in the wake of another's CREATE or DROP DATABASE (which write the
// whole template to the WAL and checkpoint): measured one database after
// another, the bounded variant, always last, came out at 0.4, against 1.0
// when the same inserts take turns in one database.
func boundedBench(ctx context.Context, serverURL string, n, rounds int) (boundedResult, error) {
	r := boundedResult{Jobs: n, Rounds: rounds}
	variants := []boundVariant{variantNoTriggers, variantUnbounded, variantBounded}
	pools := make([]*pgxpool.Pool, len(variants))
	inserters := make([]*jobs.Inserter, len(variants))
	for i, v := range variants {
		pool, drop, err := scratch(ctx, serverURL)
		if err != nil {
			return r, err
		}
		defer drop()
		if err := prepareVariant(ctx, pool, v, n, rounds); err != nil {
			return r, err
		}
		ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
		if err != nil {
			return r, err
		}
		pools[i], inserters[i] = pool, ins
	}
	best := func(cur *float64, v float64) { *cur = max(*cur, v) }
	for range rounds {
		for i, v := range variants {
			ins, err := insertRate(ctx, pools[i], inserters[i], n)
			if err != nil {
				return r, err
			}
			bulk, err := bulkRate(ctx, pools[i], inserters[i], 10*n)
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
	for _, pool := range pools {
		if err := checkCount(ctx, pool, benchQueue, rounds*11*n); err != nil {
			return r, err
		}
	}
	r.BoundedInsertRatio = r.InsertBoundedPerSec / r.InsertUnboundedPerSec
	r.BoundedBulkRatio = r.BulkBoundedPerSec / r.BulkUnboundedPerSec
	r.UnboundedTriggerInsertCost = r.InsertUnboundedPerSec / r.InsertNoTriggersPerSec
	r.UnboundedTriggerBulkCost = r.BulkUnboundedPerSec / r.BulkNoTriggersPerSec
	return r, nil
}

const benchQueue = "bench"

// prepareVariant drops the triggers of migration 010, or bounds the
// bench's queue far above what the bench inserts (every insert counted and
// checked, none refused).
func prepareVariant(ctx context.Context, pool *pgxpool.Pool, v boundVariant, n, rounds int) error {
	switch v {
	case variantNoTriggers:
		_, err := pool.Exec(ctx, `DROP TRIGGER ferry_queue_insert ON river_job;
			DROP TRIGGER ferry_queue_update ON river_job; DROP TRIGGER ferry_queue_delete ON river_job`)
		return err
	case variantBounded:
		_, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: benchQueue, MaxLength: 100 * int64(rounds*11*n)}})
		return err
	}
	return nil
}

// insertRate inserts n jobs, one per transaction, as a service does, from
// 8 goroutines.
func insertRate(ctx context.Context, pool *pgxpool.Pool, ins *jobs.Inserter, n int) (float64, error) {
	const goroutines = 8
	opts := &river.InsertOpts{Queue: benchQueue}
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
		return 0, werr
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

// bulkRate inserts n jobs with COPY in chunks of 10,000 in one
// transaction, as `enqueue bulk` does.
func bulkRate(ctx context.Context, pool *pgxpool.Pool, ins *jobs.Inserter, n int) (float64, error) {
	params := make([]river.InsertManyParams, 10_000)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: benchQueue}}
	}
	start := time.Now()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		for done := 0; done < n; done += len(params) {
			if _, err := ins.Client().InsertManyFastTx(ctx, tx, params[:min(len(params), n-done)]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bulk: %w", err)
	}
	return float64(n) / time.Since(start).Seconds(), nil
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
