package main

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	ferry "github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
)

// agingResult is how long priority-4 jobs wait under a flood of
// priority-1 jobs that keeps every worker busy, with priority aging on
// (FERRY_PRIORITY_AGING) and, for reference, off.
type agingResult struct {
	// PeriodS is the aging period.
	PeriodS float64 `json:"aging_period_s"`
	// FloodPerSec is the rate at which the server worked the flood.
	FloodPerSec float64 `json:"aging_flood_jobs_per_sec"`
	// Low is how many priority-4 jobs were inserted (one a second), and
	// Started how many of them started before the run's end; MaxWaitMS
	// is the longest wait of those, from insert to start (to the run's end
	// for one that did not start).
	Low       int     `json:"aging_low_jobs"`
	Started   int     `json:"aging_low_started"`
	MaxWaitMS float64 `json:"aging_max_wait_ms"`
	// OffStarted is how many priority-4 jobs started in a run of the same
	// length with aging off: 0 says the flood saturates the workers.
	OffStarted int `json:"aging_off_low_started"`
	// FloodOffPerSec is the flood's rate with aging off, and
	// ThroughputRatio the rate with aging against it: what the aging
	// fetch costs.
	FloodOffPerSec  float64 `json:"aging_off_flood_jobs_per_sec"`
	ThroughputRatio float64 `json:"aging_throughput_ratio"`
}

// agingBench runs the flood with aging of period, then without, each for
// dur of priority-4 inserts plus 3 periods and 20 s to let them start.
func agingBench(ctx context.Context, serverURL string, period, dur time.Duration) (agingResult, error) {
	r := agingResult{PeriodS: period.Seconds()}
	on, err := agingRound(ctx, serverURL, period, dur, 3*period+20*time.Second)
	if err != nil {
		return r, err
	}
	r.FloodPerSec, r.Low, r.Started, r.MaxWaitMS = on.floodPerSec, on.low, on.started, on.maxWaitMS
	fmt.Fprintf(os.Stderr, "aging: period %s, flood of priority-1 jobs at %.0f/s: %d of %d priority-4 jobs started, max wait %.0f ms\n",
		period, r.FloodPerSec, r.Started, r.Low, r.MaxWaitMS)
	off, err := agingRound(ctx, serverURL, 0, dur, 3*period+20*time.Second)
	if err != nil {
		return r, err
	}
	r.OffStarted, r.FloodOffPerSec = off.started, off.floodPerSec
	r.ThroughputRatio = r.FloodPerSec / r.FloodOffPerSec
	fmt.Fprintf(os.Stderr, "aging: off, flood at %.0f/s: %d of %d priority-4 jobs started; throughput with aging against without: %.2f\n",
		off.floodPerSec, off.started, off.low, r.ThroughputRatio)
	return r, nil
}

type agingRun struct {
	floodPerSec float64
	low         int
	started     int
	maxWaitMS   float64
}

// floodBacklog is how many priority-1 jobs the flood keeps inserted and
// not yet completed: enough that no worker is ever idle (1,000 run at
// once, and River's completer reports completions up to 250 ms late),
// few enough that a job inserted now is at the front of its level within
// about two seconds.
const floodBacklog = 20_000

// agingRound runs a ferry server at its defaults (aging of period; 0 is
// off) under the flood, inserts a priority-4 job a second for dur, goes
// on for tail more, and reads the priority-4 jobs' waits from their
// rows (by id) at the end. The flood's backlog is kept from the
// server's completion events and the inserts' count, never by counting
// the table.
func agingRound(ctx context.Context, serverURL string, period, dur, tail time.Duration) (agingRun, error) {
	var out agingRun
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return out, err
	}
	defer drop()
	cfg, _, err := workerConfig(pool, false)
	if err != nil {
		return out, err
	}
	cfg.Logger = workerLog()
	cfg.Queues.PriorityAging = period
	srv, err := ferry.New(ctx, cfg)
	if err != nil {
		return out, err
	}
	events, cancel := srv.River().SubscribeConfig(&river.SubscribeConfig{ChanSize: 100_000,
		Kinds: []river.EventKind{river.EventKindJobCompleted}})
	defer cancel()
	var done atomic.Int64
	go func() {
		for range events {
			done.Add(1)
		}
	}()
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	if err != nil {
		return out, err
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	exited := make(chan error, 1)
	go func() { exited <- srv.Run(runCtx) }()
	select {
	case <-srv.Started():
	case err := <-exited:
		return out, fmt.Errorf("server: %w", err)
	}

	var inserted atomic.Int64
	floodErr := make(chan error, 1)
	go func() { floodErr <- flood(runCtx, ins, &inserted, &done) }()
	start := time.Now()
	var low []int64
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	end := start.Add(dur + tail)
	for now := start; now.Before(end); {
		select {
		case err := <-floodErr:
			return out, err
		case err := <-exited:
			return out, fmt.Errorf("server: %w", err)
		case now = <-tick.C:
		}
		if now.Sub(start) < dur {
			res, err := ins.Client().Insert(ctx, jobs.NoopArgs{}, &river.InsertOpts{Priority: 4})
			if err != nil {
				return out, err
			}
			low = append(low, res.Job.ID)
		}
	}
	elapsed := time.Since(start)
	stop()
	if err := <-exited; err != nil && err != context.Canceled {
		return out, fmt.Errorf("server: %w", err)
	}
	out.floodPerSec = float64(done.Load()) / elapsed.Seconds()
	out.low = len(low)
	out.started, out.maxWaitMS, err = lowWaits(ctx, pool, low)
	return out, err
}

// flood keeps floodBacklog priority-1 jobs waiting: inserted minus
// completed, topped up in batches of 1,000.
func flood(ctx context.Context, ins *jobs.Inserter, inserted, done *atomic.Int64) error {
	batch := make([]river.InsertManyParams, 1000)
	for i := range batch {
		batch[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Priority: 1}}
	}
	for ctx.Err() == nil {
		if inserted.Load()-done.Load() >= floodBacklog {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if _, err := ins.Client().InsertManyFast(ctx, batch); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		inserted.Add(int64(len(batch)))
	}
	return nil
}

// lowWaits reads the priority-4 jobs by id: how many started, and the
// longest wait from insert to start (for a job that did not start, to
// now: a lower bound, which fails the figure as it should).
func lowWaits(ctx context.Context, pool *pgxpool.Pool, ids []int64) (int, float64, error) {
	if len(ids) == 0 {
		return 0, 0, fmt.Errorf("no priority-4 job inserted")
	}
	var started int
	var maxMS float64
	err := pool.QueryRow(ctx, `
SELECT count(attempted_at), max(extract(epoch FROM coalesce(attempted_at, now()) - created_at) * 1000)::float8
FROM river_job WHERE id = ANY($1)`, ids).Scan(&started, &maxMS)
	return started, maxMS, err
}
