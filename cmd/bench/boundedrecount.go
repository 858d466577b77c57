package main

import (
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
// goroutines), without the leader's recount and with recounts running one
// after another (RecountQueues, which counts the queue's jobs each time;
// the leader runs one a minute). The recount takes no lock that a fetch
// waits for, so the two p99s differ by the load of its count alone.
type recountFetchResult struct {
	Fetches            int     `json:"fetches"`
	Recounts           int     `json:"recounts"`
	FetchP99MS         float64 `json:"bounded_fetch_p99_ms"`
	FetchP99RecountsMS float64 `json:"bounded_fetch_p99_recounting_ms"`
}

// recountFetchBench fills a bounded queue of a database of its own with
// 2n jobs, then times n fetches without recounts and n with.
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
	params := make([]river.InsertManyParams, 2*n)
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
	fetches := func() ([]time.Duration, error) {
		var (
			mu   sync.Mutex
			took []time.Duration
			wg   sync.WaitGroup
			errs = make(chan error, 4)
		)
		for range 4 {
			wg.Go(func() {
				for range n / 4 {
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
	quiet, err := fetches()
	if err != nil {
		return r, fmt.Errorf("bounded recount: fetch: %w", err)
	}
	stop := make(chan struct{})
	recountErr := make(chan error, 1)
	go func() {
		defer close(recountErr)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := jobs.RecountQueues(ctx, pool, 10*time.Second); err != nil {
				recountErr <- err
				return
			}
			r.Recounts++
		}
	}()
	busy, err := fetches()
	close(stop)
	if rerr := <-recountErr; rerr != nil {
		return r, fmt.Errorf("bounded recount: recount: %w", rerr)
	}
	if err != nil {
		return r, fmt.Errorf("bounded recount: fetch while recounting: %w", err)
	}
	if len(quiet) == 0 || len(busy) == 0 || r.Recounts == 0 {
		return r, fmt.Errorf("bounded recount: nothing measured (%d, %d fetches, %d recounts)", len(quiet), len(busy), r.Recounts)
	}
	r.FetchP99MS, r.FetchP99RecountsMS = p99(quiet), p99(busy)
	return r, nil
}
