package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/jobs"
)

// recountFetchResult is the fetch latency of a bounded queue's workers
// (River's fetch: an UPDATE of the oldest available job FOR UPDATE SKIP
// LOCKED, then its completion, each its own transaction, from 4
// goroutines): without the leader's recount, with recounts running one
// after another (RecountQueues; the leader runs one a minute), and with
// the recount's count of the queue alone running one after another (the
// same two counts, in one statement, without the recount's reads of
// pg_locks, waits and sequence updates). On two cores a count without a
// pause takes one of them, so recounting against idle measures the CPU
// of counting; recounting against counting alone measures what the
// recount adds to it: a lock a fetch waits for, or a wait, would show
// there.
type recountFetchResult struct {
	Fetches            int     `json:"fetches"`
	Recounts           int     `json:"recounts"`
	Counts             int     `json:"counts"`
	FetchP99MS         float64 `json:"bounded_fetch_p99_ms"`
	FetchP99RecountsMS float64 `json:"bounded_fetch_p99_recounting_ms"`
	FetchP99CountsMS   float64 `json:"bounded_fetch_p99_counting_ms"`
}

// sqlRecountAlone is the recount's count of a queue ($1; $2 the job id
// mark) alone: what RecountQueues reads from river_job in its snapshot.
const sqlRecountAlone = `SELECT (SELECT count(*) FROM river_job j WHERE j.queue = $1 AND ferry_queue_counted(j.state)),
	(SELECT count(*) FROM river_job j WHERE j.queue = $1 AND ferry_queue_counted(j.state) AND j.id > $2)`

// recountFetchBench fills a bounded queue of a database of its own with
// 3n jobs, then times n fetches without recounts, then n with the count
// alone and n with recounts, taking turns in two halves each.
func recountFetchBench(ctx context.Context, serverURL string, n int) (recountFetchResult, error) {
	r := recountFetchResult{Fetches: n}
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return r, err
	}
	defer drop()
	const queue = "bounded_bench"
	if _, err := jobs.SetQueueBounds(ctx, pool, []jobs.QueueBound{{Name: queue, MaxLength: int64(4 * n)}}); err != nil {
		return r, err
	}
	ins, err := jobs.NewInserter(pool, jobs.WithSealKeys(nil))
	if err != nil {
		return r, err
	}
	params := make([]river.InsertManyParams, 3*n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.NoopArgs{}, InsertOpts: &river.InsertOpts{Queue: queue}}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := ins.InsertManyTx(ctx, tx, params)
		return err
	}); err != nil {
		return r, fmt.Errorf("bounded recount: fill: %w", err)
	}
	exec := riverpgxv5.New(pool).GetExecutor()
	fetches := func(m int) ([]time.Duration, error) {
		var (
			mu   sync.Mutex
			took []time.Duration
			wg   sync.WaitGroup
			errs = make(chan error, 4)
		)
		for range 4 {
			wg.Go(func() {
				for range m / 4 {
					// River's own fetch and completion statements, one
					// job at a time.
					began := time.Now()
					res, err := exec.JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
						ClientID: "bench-recount", MaxAttemptedBy: 100, MaxToLock: 1, Queue: queue,
					})
					if err == nil && len(res.Jobs) != 1 {
						err = fmt.Errorf("fetched %d jobs, want 1", len(res.Jobs))
					}
					if err != nil {
						errs <- err
						return
					}
					d := time.Since(began)
					now := time.Now()
					if _, err := exec.JobSetStateIfRunningMany(ctx, &riverdriver.JobSetStateIfRunningManyParams{
						ID: []int64{res.Jobs[0].ID}, Attempt: []*int{nil}, ErrData: [][]byte{nil}, FinalizedAt: []*time.Time{&now},
						MetadataDoMerge: []bool{false}, MetadataUpdates: [][]byte{nil}, Now: &now,
						ScheduledAt: []*time.Time{nil}, State: []rivertype.JobState{rivertype.JobStateCompleted},
					}); err != nil {
						errs <- err
						return
					}
					mu.Lock()
					took = append(took, d)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		close(errs)
		return took, <-errs
	}
	p99 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)*99/100].Microseconds()) / 1000
	}
	quiet, err := fetches(n)
	if err != nil {
		return r, fmt.Errorf("bounded recount: fetch: %w", err)
	}
	// during times m fetches while load runs again and again, and counts
	// its runs.
	during := func(m int, load func() error, runs *int) ([]time.Duration, error) {
		stop := make(chan struct{})
		loadErr := make(chan error, 1)
		go func() {
			defer close(loadErr)
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := load(); err != nil {
					loadErr <- err
					return
				}
				*runs++
			}
		}()
		took, err := fetches(m)
		close(stop)
		return took, cmp.Or(<-loadErr, err)
	}
	recountLoad := func() error { return jobs.RecountQueues(ctx, pool, 10*time.Second) }
	countLoad := func() error {
		var counted, since int64
		return pool.QueryRow(ctx, sqlRecountAlone, queue, int64(1)<<62).Scan(&counted, &since)
	}
	var busy, counting []time.Duration
	for range 2 {
		took, err := during(n/2, countLoad, &r.Counts)
		if err != nil {
			return r, fmt.Errorf("bounded recount: fetch while counting: %w", err)
		}
		counting = append(counting, took...)
		took, err = during(n/2, recountLoad, &r.Recounts)
		if err != nil {
			return r, fmt.Errorf("bounded recount: fetch while recounting: %w", err)
		}
		busy = append(busy, took...)
	}
	if len(quiet) == 0 || len(busy) == 0 || len(counting) == 0 || r.Recounts == 0 || r.Counts == 0 {
		return r, fmt.Errorf("bounded recount: nothing measured (%d, %d, %d fetches, %d recounts, %d counts)", len(quiet), len(counting), len(busy), r.Recounts, r.Counts)
	}
	r.FetchP99CountsMS = p99(counting)
	r.FetchP99MS, r.FetchP99RecountsMS = p99(quiet), p99(busy)
	return r, nil
}
