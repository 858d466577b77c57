package main

import (
	"context"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/base/dburl"
	"github.com/ferryq/ferry/internal/testkit/pgbouncer"
)

// pgbouncerResult is what PgBouncer in transaction mode costs a worker: the
// median over paired rounds of the pooled rate against the direct one (the
// same backlog, the same worker stack), and the insert-to-start latency of
// a service inserting through the pooler into a pooled worker. Pooled, River
// polls (no LISTEN through a transaction pooler), so pickup is bounded by
// its fetch poll interval rather than by a notification.
type pgbouncerResult struct {
	Direct     float64 `json:"direct_jobs_per_sec"`
	Pooled     float64 `json:"pooled_jobs_per_sec"`
	Ratio      float64 `json:"pgbouncer_worker_ratio"`
	DirectP50  float64 `json:"direct_latency_p50_ms"`
	DirectP99  float64 `json:"direct_latency_p99_ms"`
	PooledP50  float64 `json:"pooled_latency_p50_ms"`
	PooledP99  float64 `json:"pooled_latency_p99_ms"`
	LatencyDur string  `json:"latency_duration"`
}

// pgbouncerThroughput measures n-job backlogs rounds times each way, direct
// and pooled in each round, and the latency at rate for dur pooled, and
// direct too when direct is set (the full run measures that latency in a
// step of its own).
func pgbouncerThroughput(ctx context.Context, serverURL string, n, rounds, rate int, dur time.Duration, direct bool) (pgbouncerResult, error) {
	var r pgbouncerResult
	p, err := pairedRounds(rounds,
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, false) },
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, true) })
	if err != nil {
		return r, err
	}
	r.Direct, r.Pooled, r.Ratio = p.Base, p.Other, p.Ratio()
	if direct {
		if r.DirectP50, r.DirectP99, _, err = ferryLatency(ctx, serverURL, rate, dur, false); err != nil {
			return r, err
		}
	}
	r.PooledP50, r.PooledP99, _, err = ferryLatency(ctx, serverURL, rate, dur, true)
	r.LatencyDur = dur.String()
	return r, err
}

// workerConfig is the configuration of a bench worker on the scratch
// database behind pool: direct, or (pooled) with its job traffic through a
// PgBouncer in transaction mode started for it, and its session-bound
// traffic (leader lock, liveness, LISTEN) on the direct URL, as
// docs/operations.md tells a deployment to run. stop ends the PgBouncer.
func workerConfig(pool *pgxpool.Pool, pooled bool) (ferry.Config, func(), error) {
	direct := pool.Config().ConnString()
	cfg := ferry.Config{Database: ferry.DatabaseConfig{URL: direct}, Admin: ferry.AdminConfig{Addr: "off"}}
	if !pooled {
		return cfg, func() {}, nil
	}
	dir, err := os.MkdirTemp("", "ferry-bench-pgbouncer-")
	if err != nil {
		return cfg, nil, err
	}
	u, stop, err := pgbouncer.Run(direct, dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return cfg, nil, err
	}
	cfg.Database.URL, cfg.Database.SessionURL, cfg.Database.Pooler = u, direct, dburl.PoolerTransaction
	return cfg, func() { stop(); _ = os.RemoveAll(dir) }, nil
}
