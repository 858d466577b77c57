package main

import (
	"context"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
)

// sustainedResult is ferry at its defaults under a steady load at half its
// measured maximum, for a long run.
type sustainedResult struct {
	MaxJobsPerSec float64 `json:"sustained_max_jobs_per_sec"`
	Rate          int     `json:"sustained_rate"`
	Jobs          int     `json:"sustained_jobs"`
	// Inserted is the rate the producer reached (a batch that takes longer
	// than its 10 ms skips ticks).
	Inserted float64 `json:"sustained_inserted_per_sec"`
	// Unstarted is how many jobs had not started two minutes after the
	// last insert: the worker fell behind the load, and the p99s are of
	// the jobs that started.
	Unstarted int `json:"sustained_unstarted"`
	// P99ByMinute is insert-to-start p99 of the jobs inserted in each
	// minute; Drift the last minute's over the first's (target ≤ 1.5),
	// null when the run fell behind or a minute has no started job: a
	// p99 of the jobs that did start says nothing of those that did not.
	P99ByMinute []float64 `json:"sustained_p99_ms_by_minute"`
	Drift       *float64  `json:"sustained_p99_drift"`
	// river_job at the end: rows live and dead (pg_stat_user_tables) and
	// its size with indexes and TOAST.
	LiveTuples int64   `json:"sustained_river_job_live_tuples"`
	DeadTuples int64   `json:"sustained_river_job_dead_tuples"`
	TableMB    float64 `json:"sustained_river_job_mb"`
	// Vacuums and Analyzes the bench ran in autovacuum's place, on a
	// server whose autovacuum is off (Autovacuum "bench"; "server" when
	// the server's own ran).
	Autovacuum string      `json:"sustained_autovacuum"`
	Vacuums    int         `json:"sustained_bench_vacuums"`
	Analyzes   int         `json:"sustained_bench_analyzes"`
	VacuumRuns []vacuumRun `json:"sustained_vacuum_runs"`
	// What the server did meanwhile: checkpoints (timed and requested,
	// the latter forced by WAL volume), buffers written by backends
	// themselves (a full shared_buffers), and its shared_buffers.
	Server serverActivity `json:"sustained_server"`
}

// serverActivity is what the server's cumulative statistics counted over
// a run.
type serverActivity struct {
	SharedBuffers      string `json:"shared_buffers"`
	CheckpointsTimed   int64  `json:"checkpoints_timed"`
	CheckpointsReq     int64  `json:"checkpoints_requested"`
	BuffersBackend     int64  `json:"buffers_written_by_backends"`
	BuffersCheckpoints int64  `json:"buffers_written_by_checkpoints"`
}

// readServerActivity reads the server's counters (pg_stat_bgwriter; from
// Postgres 17, pg_stat_checkpointer and pg_stat_io).
func readServerActivity(ctx context.Context, pool *pgxpool.Pool) (serverActivity, error) {
	var a serverActivity
	var version int
	if err := pool.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, current_setting('shared_buffers')").Scan(&version, &a.SharedBuffers); err != nil {
		return a, err
	}
	q := `SELECT checkpoints_timed, checkpoints_req, buffers_backend, buffers_checkpoint FROM pg_stat_bgwriter`
	if version >= 170000 {
		q = `SELECT c.num_timed, c.num_requested,
			(SELECT coalesce(sum(writes), 0)::bigint FROM pg_stat_io WHERE backend_type = 'client backend'), c.buffers_written
			FROM pg_stat_checkpointer c`
	}
	err := pool.QueryRow(ctx, q).Scan(&a.CheckpointsTimed, &a.CheckpointsReq, &a.BuffersBackend, &a.BuffersCheckpoints)
	return a, err
}

// since is a's counters less those of before.
func (a serverActivity) since(before serverActivity) serverActivity {
	a.CheckpointsTimed -= before.CheckpointsTimed
	a.CheckpointsReq -= before.CheckpointsReq
	a.BuffersBackend -= before.BuffersBackend
	a.BuffersCheckpoints -= before.BuffersCheckpoints
	return a
}

// sustained measures ferry's backlog throughput at its defaults, then
// inserts at half of it for dur (through jobs.Inserter, a batch every
// 10 ms, each job stamped with its insert time) into a server with the
// defaults, and reports p99 by minute and the table at the end. On a
// server whose autovacuum is off, the bench vacuums its database as
// autovacuum would (autovacuumStandIn): a deployment runs with it.
func sustained(ctx context.Context, serverURL string, backlog int, dur time.Duration) (sustainedResult, error) {
	var res sustainedResult
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()

	// The maximum: a backlog worked at the defaults.
	if res.MaxJobsPerSec, err = backlogRate(ctx, pool, backlog); err != nil {
		return res, err
	}
	res.Rate = int(res.MaxJobsPerSec / 2)
	av, err := startAutovacuumStandIn(ctx, pool)
	if err != nil {
		return res, err
	}
	defer func() { _, _, _, _ = av.stop() }() // before the database is dropped
	res.Autovacuum = "server"
	if av != nil {
		res.Autovacuum = "bench"
	}

	// The steady load.
	w := &stampKind{}
	_, stop, err := startServer(ctx, ferry.Config{
		Kinds:  []jobs.Kind{jobs.Define[stampArgs](w, river.QueueDefault, "bench stamp")},
		Logger: workerLog(), Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()}, Admin: ferry.AdminConfig{Addr: "off"}})
	if err != nil {
		return res, err
	}
	defer stop()
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		return res, err
	}
	before, err := readServerActivity(ctx, pool)
	if err != nil {
		return res, err
	}
	const every = 10 * time.Millisecond
	perBatch := max(1, res.Rate/int(time.Second/every))
	t := time.NewTicker(every)
	defer t.Stop()
	t0 := time.Now()
	params := make([]river.InsertManyParams, perBatch)
	for time.Since(t0) < dur {
		<-t.C
		now := time.Now().UnixNano()
		for i := range params {
			params[i] = river.InsertManyParams{Args: stampArgs{At: now}}
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := ins.Client().InsertManyTx(ctx, tx, params)
			return err
		}); err != nil {
			return res, err
		}
		res.Jobs += perBatch
	}
	res.Inserted = float64(res.Jobs) / time.Since(t0).Seconds()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		w.mu.Lock()
		got := len(w.lats)
		w.mu.Unlock()
		if got >= res.Jobs {
			break
		}
		if time.Now().After(deadline) {
			// Fell behind: the figures below are of the jobs that started,
			// and Unstarted says how far behind.
			res.Unstarted = res.Jobs - got
			break
		}
		time.Sleep(100 * time.Millisecond)
	}

	w.mu.Lock()
	minutes := int(dur / time.Minute)
	buckets := make([][]float64, max(minutes, 1))
	for i, at := range w.at {
		m := min(int(time.Duration(at-t0.UnixNano())/time.Minute), len(buckets)-1)
		buckets[max(m, 0)] = append(buckets[max(m, 0)], w.lats[i])
	}
	w.mu.Unlock()
	measured := res.Unstarted == 0
	for _, b := range buckets {
		measured = measured && len(b) > 0
		res.P99ByMinute = append(res.P99ByMinute, pct(b, 99))
	}
	if measured {
		drift := res.P99ByMinute[len(res.P99ByMinute)-1] / res.P99ByMinute[0]
		res.Drift = &drift
	}

	if res.Vacuums, res.Analyzes, res.VacuumRuns, err = av.stop(); err != nil {
		return res, err
	}
	after, err := readServerActivity(ctx, pool)
	if err != nil {
		return res, err
	}
	res.Server = after.since(before)
	var bytes int64
	if err := pool.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, pg_total_relation_size('river_job')
		FROM pg_stat_user_tables WHERE relname = 'river_job'`).Scan(&res.LiveTuples, &res.DeadTuples, &bytes); err != nil {
		return res, err
	}
	res.TableMB = float64(bytes) / (1 << 20)
	return res, nil
}

// driftText prints a drift, or why there is none.
func driftText(d *float64) string {
	if d == nil {
		return "not measured (fell behind, or a minute started no job)"
	}
	return strconv.FormatFloat(*d, 'f', 2, 64)
}
