package main

import (
	"context"
	"fmt"
	"time"

	"github.com/ferryq/ferry/internal/testkit/pgcluster"
)

// failover crashes the primary (pg_ctl stop -m immediate) under load and
// promotes its synchronous standby, which every client reaches through its
// multi-host URL (target_session_attrs=read-write). Nothing of the
// workers' survives on the old primary: their sessions, the leader lock
// and the liveness locks are gone with it. The note says when every
// working worker had started a job on the new primary again.
func (s *suite) failover(ctx context.Context, primary, standby *pgcluster.Cluster) (string, error) {
	s.expose(exposedFailover, s.workers.Live()...)
	at := time.Now()
	if err := primary.Crash(); err != nil {
		return "", err
	}
	if err := standby.Promote(); err != nil {
		return "", err
	}
	promoted := time.Since(at)
	back, err := s.waitAllWorking(ctx, at, 2*time.Minute)
	if err != nil {
		return "", err
	}
	s.failoverRecovery = back
	return fmt.Sprintf("promoted after %s; every worker back at work after %s", promoted.Round(time.Millisecond), back.Round(time.Millisecond)), nil
}

// waitAllWorking returns, as a time since t, when every working worker
// (the replacements of any that stopped among them) has started a job
// since t.
func (s *suite) waitAllWorking(ctx context.Context, t time.Time, timeout time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var pids []int32
		for _, p := range s.working() {
			pids = append(pids, int32(p.Pid()))
		}
		var back int
		err := s.pool.QueryRow(ctx, `SELECT count(DISTINCT w.pid) FROM ferry_worker w
			WHERE w.pid = ANY($1) AND EXISTS (SELECT 1 FROM river_job j
				WHERE j.attempted_at > $2 AND j.attempted_by[cardinality(j.attempted_by)] = w.client_id)`, pids, t).Scan(&back)
		if err == nil && len(pids) >= 3 && back == len(pids) {
			return time.Since(t), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, fmt.Errorf("not every worker started a job within %s of the failover", timeout)
}
