package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/scratchdb"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/internal/testkit/pgcluster"
	"github.com/ferryq/ferry/jobs"
)

// pgFailoverResult is what a Postgres primary failover costs the workers:
// from the primary's crash (pg_ctl stop -m immediate) under load to the
// promoted standby accepting writes (PromoteMS), and to every worker
// having started a job on it (RecoveryMS, the bench key
// pg_failover_recovery_ms); the inserts acknowledged before and after it
// and those missing at the end (Lost: synchronous replication must make
// it 0); and the workers that stopped themselves, declared dead after
// their liveness session went with the old primary, and were replaced as
// an orchestrator would.
type pgFailoverResult struct {
	Trials           int       `json:"trials"`
	TickMS           int64     `json:"tick_ms"`
	PromoteMS        []float64 `json:"promote_ms"`
	RecoveryMS       []float64 `json:"recovery_ms"`
	RecoveryMedianMS float64   `json:"pg_failover_recovery_ms_median"`
	RecoveryMaxMS    float64   `json:"pg_failover_recovery_ms"`
	Acknowledged     int64     `json:"acknowledged_inserts"`
	Lost             int64     `json:"lost_inserts"`
	Replaced         int       `json:"workers_replaced"`
}

// pgFailover runs trials failovers, each on a primary and a synchronous
// standby of its own, with three worker processes (leader tick tick, 0:
// the default) and
// a producer inserting 200 jobs/s through jobs.Inserter, all on a
// multi-host URL with target_session_attrs=read-write.
func pgFailover(ctx context.Context, trials int, tick time.Duration) (pgFailoverResult, error) {
	res := pgFailoverResult{Trials: trials, TickMS: cmp.Or(tick, election.DefaultTick).Milliseconds()}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	for range trials {
		if err := pgFailoverTrial(ctx, bin, tick, &res); err != nil {
			return res, err
		}
	}
	res.RecoveryMedianMS, res.RecoveryMaxMS = medianMax(res.RecoveryMS)
	return res, nil
}

func pgFailoverTrial(ctx context.Context, bin string, tick time.Duration, res *pgFailoverResult) error {
	primary, standby, err := pgcluster.StartReplicated()
	if err != nil {
		return fmt.Errorf("primary and standby: %w", err)
	}
	defer primary.Stop()
	defer standby.Stop()
	u, _, err := scratchdb.New(ctx, primary.URL("postgres"), true)
	if err != nil {
		return err
	}
	if u, err = pgcluster.MultiHostURL(u, primary, standby); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, u)
	if err != nil {
		return err
	}
	defer pool.Close()
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		return err
	}

	w := &workers{Fleet: fleet.New(), bin: bin, url: u, tick: tick}
	defer func() { _ = w.Kill(time.Minute) }()
	wait := 4*tick + 10*time.Second
	start := func() error {
		p, err := w.start("default=20")
		if err != nil {
			return err
		}
		_, err = w.await(nil, "ferry: started", p, wait)
		return err
	}
	for range 3 {
		if err := start(); err != nil {
			return err
		}
	}

	// The producer: one job a transaction, every 5 ms; an insert whose
	// commit was acknowledged is remembered, one that failed (the primary
	// down) is not retried.
	pctx, stopProducer := context.WithCancel(ctx)
	var (
		mu    sync.Mutex
		acked []int64
		wg    sync.WaitGroup
	)
	wg.Go(func() {
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		for pctx.Err() == nil {
			var id int64
			err := pgx.BeginFunc(pctx, pool, func(tx pgx.Tx) error {
				j, err := ins.InsertTx(pctx, tx, jobs.NoopArgs{}, nil)
				if err == nil {
					id = j.Job.ID
				}
				return err
			})
			if err == nil {
				mu.Lock()
				acked = append(acked, id)
				mu.Unlock()
			}
			select {
			case <-pctx.Done():
			case <-t.C:
			}
		}
	})
	defer func() { stopProducer(); wg.Wait() }()
	time.Sleep(2 * time.Second)

	t0 := time.Now()
	if err := primary.Crash(); err != nil {
		return err
	}
	if err := standby.Promote(); err != nil {
		return err
	}
	res.PromoteMS = append(res.PromoteMS, float64(time.Since(t0).Microseconds())/1000)

	// Every worker back: each live worker has started a job since t0. A
	// worker that stopped itself is replaced.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			return errors.New("pg failover: not every worker started a job within 2m of the primary's crash")
		}
		live := w.Live()
		if len(live) < 3 {
			res.Replaced++
			if err := start(); err != nil {
				return err
			}
			continue
		}
		pids := make([]int32, len(live))
		for i, p := range live {
			pids[i] = int32(p.Pid())
		}
		var back int
		err := pool.QueryRow(ctx, `SELECT count(DISTINCT w.pid) FROM ferry_worker w
			WHERE w.pid = ANY($1) AND EXISTS (SELECT 1 FROM river_job j
				WHERE j.attempted_at > $2 AND j.attempted_by[cardinality(j.attempted_by)] = w.client_id)`, pids, t0).Scan(&back)
		if err == nil && back == len(pids) {
			res.RecoveryMS = append(res.RecoveryMS, float64(time.Since(t0).Microseconds())/1000)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	stopProducer()
	wg.Wait()

	mu.Lock()
	ids := acked
	mu.Unlock()
	var found int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_job WHERE id = ANY($1)", ids).Scan(&found); err != nil {
		return err
	}
	res.Acknowledged += int64(len(ids))
	res.Lost += int64(len(ids)) - found
	return nil
}
