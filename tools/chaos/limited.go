package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// nameLimited is the limits check.
const nameLimited = "limits: a tenant's running jobs never exceed its concurrency, every job runs"

// Jobs under a limit: limitedTenants tenants, each inserting a burst of
// limitedBurst jobs every limitedEvery through the load window (more at
// once than the limit lets run, so that jobs park behind it; fewer over
// time than it lets through, so that none waits for ever), each running
// limitedSleepMS, under a concurrency of limitedConcurrency per tenant
// (the suite's FERRY_CONFIG).
const (
	limitedTenants     = 3
	limitedBurst       = 3
	limitedEvery       = 900 * time.Millisecond
	limitedSleepMS     = 300
	limitedConcurrency = 2
)

// produceLimited inserts the tenants' bursts until ctx ends, counting the
// jobs whose insert committed in n. A burst whose insert fails is not
// retried: the count holds what committed.
func (s *suite) produceLimited(ctx context.Context, n *atomic.Int64) {
	ins, err := jobs.NewInserter(s.jobPool, jobs.WithSealKeys(nil))
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		for t := range limitedTenants {
			err := pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
				for range limitedBurst {
					if _, err := ins.InsertTx(ctx, tx, jobs.RawArgs{KindName: "chaos.limited",
						JSON: fmt.Appendf(nil, `{"tenant":"tenant-%d","sleep_ms":%d}`, t, limitedSleepMS)}, &river.InsertOpts{Queue: river.QueueDefault}); err != nil {
						return err
					}
				}
				return nil
			})
			if err == nil {
				n.Add(limitedBurst)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(limitedEvery):
		}
	}
}

// limitedObs is what the oracle reads of the limited jobs.
type limitedObs struct {
	committed int64
	jobs      int      // chaos.limited jobs in river_job
	completed int      // of them, completed
	runs      int      // starts recorded
	most      int      // the most other running jobs of its tenant a start saw
	over      []string // starts that saw the limit exceeded
	err       error
}

func observeLimited(ctx context.Context, pool *pgxpool.Pool, committed int64) limitedObs {
	o := limitedObs{committed: committed}
	if o.err = pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'completed') FROM river_job WHERE kind = 'chaos.limited'`).Scan(&o.jobs, &o.completed); o.err != nil {
		return o
	}
	if o.err = pool.QueryRow(ctx, `SELECT count(*), coalesce(max(others), 0) FROM chaos_limit_run`).Scan(&o.runs, &o.most); o.err != nil {
		return o
	}
	rows, _ := pool.Query(ctx, `SELECT format('job %s of %s beside %s others', job_id, tenant, others) FROM chaos_limit_run WHERE others >= $1 ORDER BY at LIMIT 20`, limitedConcurrency)
	var over string
	_, o.err = pgx.ForEachRow(rows, []any{&over}, func() error { o.over = append(o.over, over); return nil })
	return o
}

// checkLimited: no limited job started while its tenant's limit was full
// (River showing limitedConcurrency others of its tenant running, a
// killed worker's among them until rescued), and every committed job
// completed (none left parked behind its gate). No insert or no run is
// unverified.
func checkLimited(o limitedObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameLimited, verdictUnverified, "query failed: %v", o.err)
	case o.committed == 0 || o.runs == 0:
		return newCheck(nameLimited, verdictUnverified, "%d limited jobs committed, %d runs", o.committed, o.runs)
	case len(o.over) > 0:
		return newCheck(nameLimited, verdictViolated, "starts beyond the concurrency of %d: %v", limitedConcurrency, o.over)
	case int64(o.completed) < o.committed || o.completed < o.jobs:
		return newCheck(nameLimited, verdictViolated, "%d limited jobs committed, %d in river_job, %d completed: some never ran", o.committed, o.jobs, o.completed)
	}
	return newCheck(nameLimited, verdictOK, "%d limited jobs on %d tenants, all completed in %d runs; a start saw at most %d others of its tenant running (concurrency %d)",
		o.jobs, limitedTenants, o.runs, o.most, limitedConcurrency)
}
