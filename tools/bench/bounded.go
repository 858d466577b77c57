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
// inserts (COPY in chunks, as `enqueue bulk` does), each
// with the queue bounded, unbounded (ferry's schema as a deployment without
// bounds has it: since migration 013 the counting triggers are not on
// river_job then), and on river_job as River makes it (every trigger of
// ferry's dropped), each on a database of its own. The three variants take
// turns in each round; the rates are the best of the rounds, and each ratio
// is the median of the rounds' own ratios (a round's variants run within
// seconds of each other, so that a slow spell of this shared machine hits
// all three; ratios of best-of rates measured minutes apart ranged from
// 0.75 to 0.89 for one build). The unbounded_* ratios are
// thus the cost of ferry's triggers to a deployment without bounds, and
// the bounded_* ratios the cost of a bound against that deployment. Within
// a round the variants take turns in slices (takeTurns): a tenth of the
// single inserts, one chunk of the bulk insert.
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
	var insRatios, bulkRatios, trigInsRatios, trigBulkRatios []float64
	for round := range rounds {
		insRates, bulkRates, err := insertAndBulkRates(ctx, pools, inserters, n, round)
		if err != nil {
			return r, err
		}
		var ins, bulk [3]float64
		for i, v := range variants {
			ins[v], bulk[v] = insRates[i], bulkRates[i]
		}
		best(&r.InsertNoTriggersPerSec, ins[variantNoTriggers])
		best(&r.BulkNoTriggersPerSec, bulk[variantNoTriggers])
		best(&r.InsertUnboundedPerSec, ins[variantUnbounded])
		best(&r.BulkUnboundedPerSec, bulk[variantUnbounded])
		best(&r.InsertBoundedPerSec, ins[variantBounded])
		best(&r.BulkBoundedPerSec, bulk[variantBounded])
		insRatios = append(insRatios, ins[variantBounded]/ins[variantUnbounded])
		bulkRatios = append(bulkRatios, bulk[variantBounded]/bulk[variantUnbounded])
		trigInsRatios = append(trigInsRatios, ins[variantUnbounded]/ins[variantNoTriggers])
		trigBulkRatios = append(trigBulkRatios, bulk[variantUnbounded]/bulk[variantNoTriggers])
	}
	// Every round's clock has stopped: one count of each database checks
	// that every insert landed.
	for _, pool := range pools {
		if err := checkCount(ctx, pool, benchQueue, rounds*11*n); err != nil {
			return r, err
		}
	}
	r.BoundedInsertRatio, _ = medianMax(insRatios)
	r.BoundedBulkRatio, _ = medianMax(bulkRatios)
	r.UnboundedTriggerInsertCost, _ = medianMax(trigInsRatios)
	r.UnboundedTriggerBulkCost, _ = medianMax(trigBulkRatios)
	return r, nil
}

const benchQueue = "bench"

// prepareVariant drops every trigger of ferry's on river_job, or bounds the
// bench's queue far above what the bench inserts (every insert counted and
// checked, none refused).
func prepareVariant(ctx context.Context, pool *pgxpool.Pool, v boundVariant, n, rounds int) error {
	switch v {
	case variantNoTriggers:
		rows, err := pool.Query(ctx, `SELECT tgname FROM pg_trigger WHERE tgrelid = 'river_job'::regclass AND NOT tgisinternal`)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		if len(names) == 0 {
			return fmt.Errorf("no trigger of ferry's on river_job to drop: the reference would not be River's table")
		}
		for _, name := range names {
			if _, err := pool.Exec(ctx, "DROP TRIGGER "+pgx.Identifier{name}.Sanitize()+" ON river_job"); err != nil {
				return err
			}
		}
		return nil
	case variantBounded:
		_, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: benchQueue, MaxLength: 100 * int64(rounds*11*n)}})
		return err
	}
	return nil
}

// takeTurns measures the rate of each variant i doing n jobs, in slices
// of n/slices that the variants take in turns (run(i, k) does k jobs of
// variant i and says how long they took). Each slice lasts a fraction of a
// second, so a slow spell of this shared machine, which lasts seconds,
// falls on every variant alike; and the order of the turns changes with
// every slice (turnOrder), so that no variant always runs in the wake of
// the same other's writes (its commits' WAL, the dirty buffers it leaves
// to be written).
//
// It first turned the variants in one cycle, starting with the next one
// each round: the unbounded variant then always followed the one without
// triggers, and the bounded one the unbounded, so that an effect of the
// order would have been read as the triggers' cost or the bound's.
func takeTurns(variants, n, slices, round int, run func(i, k int) (time.Duration, error)) ([]float64, error) {
	took := make([]time.Duration, variants)
	for s := range slices {
		for _, i := range turnOrder(variants, round*slices+s) {
			d, err := run(i, n*(s+1)/slices-n*s/slices)
			if err != nil {
				return nil, err
			}
			took[i] += d
		}
	}
	rates := make([]float64, variants)
	for i, d := range took {
		rates[i] = float64(n) / d.Seconds()
	}
	return rates, nil
}

// turnOrder is the order in which variants take their turns in slice k
// of a run: the variants' permutations in turn, so that over any
// variants! consecutive slices each variant goes first as often as any
// other and follows each other variant as often as any other.
func turnOrder(variants, k int) []int {
	perms := permutations(variants)
	return perms[k%len(perms)]
}

// permutations lists the orders of 0 … n-1, n! of them.
func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for at := range n {
			q := make([]int, 0, n)
			q = append(q, p[:at]...)
			q = append(q, n-1)
			q = append(q, p[at:]...)
			out = append(out, q)
		}
	}
	return out
}

// insertAndBulkRates measures, for each pool and its inserter, n inserts
// one job per transaction (insertTime, in slices of n/10) and 10n jobs
// by COPY (bulkTime, in slices of a chunk of 10,000), taking turns.
func insertAndBulkRates(ctx context.Context, pools []*pgxpool.Pool, inserters []*jobs.Inserter, n, round int) (ins, bulk []float64, err error) {
	ins, err = takeTurns(len(pools), n, 10, round, func(i, k int) (time.Duration, error) {
		return insertTime(ctx, pools[i], inserters[i], k)
	})
	if err != nil {
		return nil, nil, err
	}
	bulk, err = takeTurns(len(pools), 10*n, max(1, 10*n/bulkChunk), round, func(i, k int) (time.Duration, error) {
		return bulkTime(ctx, pools[i], inserters[i], k)
	})
	return ins, bulk, err
}

// insertTime inserts n jobs, one per transaction, as a service does, from
// 8 goroutines, and says how long they took.
func insertTime(ctx context.Context, pool *pgxpool.Pool, ins *jobs.Inserter, n int) (time.Duration, error) {
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
	return time.Since(start), nil
}

// bulkChunk is the size of enqueue bulk's chunks.
const bulkChunk = 10_000

// bulkTime inserts n jobs with COPY in chunks of bulkChunk in one
// transaction, as `enqueue bulk` does, and says how long they took.
func bulkTime(ctx context.Context, pool *pgxpool.Pool, ins *jobs.Inserter, n int) (time.Duration, error) {
	params := make([]river.InsertManyParams, min(n, bulkChunk))
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
	return time.Since(start), nil
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
