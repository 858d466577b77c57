package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// nameFair is the fairness check.
const nameFair = "fairness: a key with jobs waiting is never starved by a flood, every job runs"

// A queue shared by weight (the suite's FERRY_CONFIG: fairness on
// fairQueue by the args' source, every source of weight 1, and
// fairWorkers workers of it in each chaos worker). One source, fairFlood,
// keeps fairBacklog of its jobs waiting through the load window: far more
// than the workers run in a poll or a fault, so that in River's order
// (priority, scheduled_at, id) a job inserted behind them waits for all
// of them. fairQuiet quiet sources each insert one job every fairEvery.
// Every job runs fairSleepMS.
const (
	fairQueue   = "chaos_fair"
	fairWorkers = 2
	fairFlood   = "flood"
	fairBacklog = 1000
	fairTopUp   = 250 * time.Millisecond
	fairQuiet   = 3
	fairEvery   = 400 * time.Millisecond
	fairSleepMS = 50
)

// fairRun is what the fairness producers committed.
type fairRun struct {
	flood, quiet atomic.Int64
}

// produceFair runs the flood and the quiet sources until ctx ends. The
// quiet sources start once the flood's first batch committed, so that
// every quiet job has a flood ahead of it.
func (s *suite) produceFair(ctx context.Context, n *fairRun) {
	ins, err := jobs.NewInserter(s.jobPool, jobs.WithSealKeys(nil))
	if err != nil {
		return
	}
	insert := func(source string, count int) error {
		params := make([]river.InsertManyParams, count)
		for i := range params {
			params[i] = river.InsertManyParams{Args: jobs.RawArgs{KindName: "chaos.fair",
				JSON: fmt.Appendf(nil, `{"source":%q,"sleep_ms":%d}`, source, fairSleepMS)}, InsertOpts: &river.InsertOpts{Queue: fairQueue}}
		}
		return pgx.BeginFunc(ctx, s.jobPool, func(tx pgx.Tx) error {
			_, err := ins.InsertManyTx(ctx, tx, params)
			return err
		})
	}
	flooded := make(chan struct{})
	var flood sync.WaitGroup
	defer flood.Wait()
	flood.Go(func() {
		// The flood tops its waiting jobs up to fairBacklog (read on the
		// direct pool, as the oracle reads).
		first := true
		for ctx.Err() == nil {
			var waiting int
			err := s.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'chaos.fair' AND args->>'source' = $1
				AND state IN ('pending', 'available')`, fairFlood).Scan(&waiting)
			if err == nil && waiting < fairBacklog {
				if err := insert(fairFlood, fairBacklog-waiting); err == nil {
					n.flood.Add(int64(fairBacklog - waiting))
					if first {
						first = false
						close(flooded)
					}
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(fairTopUp):
			}
		}
	})
	select {
	case <-ctx.Done():
		return
	case <-flooded:
	}
	for ctx.Err() == nil {
		for q := range fairQuiet {
			if insert(fmt.Sprintf("quiet-%d", q), 1) == nil {
				n.quiet.Add(1)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(fairEvery):
		}
	}
}

// fairObs is what the oracle reads of the fair queue's jobs.
type fairObs struct {
	flood, quiet int64 // committed
	// In river_job: the flood's jobs, completed, and discarded or
	// cancelled (lost); the quiet jobs and completed.
	floodJobs, floodDone, floodLost int
	quietJobs, quietDone            int
	// Of the quiet jobs started: those with flood jobs waiting when
	// inserted (checked), and of them those that started after every one
	// of those (starved: River's order); the least share of them a quiet
	// job passed; the longest quiet and flood waits to a first start.
	started, checked int
	starved          []string
	leastPassed      float64
	quietWait        time.Duration
	floodWait        time.Duration
	err              error
}

// sqlFairJobs reads each chaos.fair job's source, insert, first start (of
// chaos_fair_run, written by the job as it starts) and state; sqlFairQuiet
// adds to each quiet job started the flood jobs inserted before it still
// waiting at its insert (ahead) and at its first start (passed).
const (
	sqlFairJobs = `WITH first AS (SELECT job_id, min(at) AS at FROM chaos_fair_run GROUP BY job_id)
SELECT j.id, j.args->>'source' AS source, j.created_at, f.at AS started, j.state
FROM river_job j LEFT JOIN first f ON f.job_id = j.id WHERE j.kind = 'chaos.fair'`
	sqlFairCounts = `WITH j AS (` + sqlFairJobs + `)
SELECT count(*) FILTER (WHERE source = $1),
       count(*) FILTER (WHERE source = $1 AND state = 'completed'),
       count(*) FILTER (WHERE source = $1 AND state IN ('discarded', 'cancelled')),
       count(*) FILTER (WHERE source <> $1),
       count(*) FILTER (WHERE source <> $1 AND state = 'completed'),
       coalesce(max(extract(epoch FROM started - created_at)) FILTER (WHERE source <> $1), 0),
       coalesce(max(extract(epoch FROM started - created_at)) FILTER (WHERE source = $1), 0)
FROM j`
	sqlFairQuiet = `WITH j AS MATERIALIZED (` + sqlFairJobs + `),
fl AS MATERIALIZED (SELECT created_at, coalesce(started, 'infinity') AS started FROM j WHERE source = $1)
SELECT q.id, q.source, extract(epoch FROM q.started - q.created_at),
  (SELECT count(*) FROM fl WHERE fl.created_at < q.created_at AND fl.started > q.created_at),
  (SELECT count(*) FROM fl WHERE fl.created_at < q.created_at AND fl.started > q.started)
FROM j q WHERE q.source <> $1 AND q.started IS NOT NULL ORDER BY q.id`
)

func observeFair(ctx context.Context, pool *pgxpool.Pool, n *fairRun) fairObs {
	o := fairObs{flood: n.flood.Load(), quiet: n.quiet.Load(), leastPassed: 1}
	var quietWait, floodWait float64
	if o.err = pool.QueryRow(ctx, sqlFairCounts, fairFlood).Scan(&o.floodJobs, &o.floodDone, &o.floodLost,
		&o.quietJobs, &o.quietDone, &quietWait, &floodWait); o.err != nil {
		return o
	}
	o.quietWait, o.floodWait = time.Duration(quietWait*float64(time.Second)), time.Duration(floodWait*float64(time.Second))
	rows, _ := pool.Query(ctx, sqlFairQuiet, fairFlood)
	var id int64
	var source string
	var wait float64
	var ahead, passed int
	_, o.err = pgx.ForEachRow(rows, []any{&id, &source, &wait, &ahead, &passed}, func() error {
		o.started++
		if ahead == 0 {
			return nil
		}
		o.checked++
		o.leastPassed = min(o.leastPassed, float64(passed)/float64(ahead))
		if passed == 0 && len(o.starved) < 20 {
			o.starved = append(o.starved, fmt.Sprintf("job %d of %s waited %.1fs, behind all %d flood jobs waiting at its insert", id, source, wait, ahead))
		}
		return nil
	})
	return o
}

// checkFair: every quiet job committed completed; every quiet job that
// had flood jobs waiting when it was inserted started before the last of
// them did (in River's order it would start after all of them: with
// fairness it is served at the next claims whatever the flood's backlog);
// no flood job was lost (discarded or cancelled: the others completed or
// wait still). The bound is on order, not on time: a fault (a kill -9, a
// Postgres restart) may hold a quiet job for seconds, but the flood does
// not run past it meanwhile. Fails closed: no quiet job, no flood, or
// fewer than half of the quiet jobs with a flood ahead of them is
// unverified.
func checkFair(o fairObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameFair, verdictUnverified, "query failed: %v", o.err)
	case o.flood == 0 || o.quiet == 0 || o.started == 0:
		return newCheck(nameFair, verdictUnverified, "%d flood and %d quiet jobs committed, %d quiet started", o.flood, o.quiet, o.started)
	case 2*o.checked < o.started:
		return newCheck(nameFair, verdictUnverified, "only %d of %d quiet jobs started had flood jobs waiting at their insert: the flood kept no backlog", o.checked, o.started)
	case len(o.starved) > 0:
		return newCheck(nameFair, verdictViolated, "quiet jobs starved by the flood: %v", o.starved)
	case int64(o.quietDone) < o.quiet || o.quietDone < o.quietJobs:
		return newCheck(nameFair, verdictViolated, "%d quiet jobs committed, %d in river_job, %d completed: some never ran", o.quiet, o.quietJobs, o.quietDone)
	case o.floodLost > 0 || int64(o.floodJobs) < o.flood:
		return newCheck(nameFair, verdictViolated, "%d flood jobs committed, %d in river_job, %d discarded or cancelled: some lost", o.flood, o.floodJobs, o.floodLost)
	}
	return newCheck(nameFair, verdictOK, "%d quiet jobs of %d sources all completed beside a flood of %d (%d completed, none lost), each before the flood jobs waiting at its insert (%d checked: at least %.0f%% of them passed); longest wait to a first start: quiet %s, flood %s",
		o.quietJobs, fairQuiet, o.floodJobs, o.floodDone, o.checked, 100*o.leastPassed, o.quietWait.Round(time.Millisecond), o.floodWait.Round(time.Millisecond))
}
