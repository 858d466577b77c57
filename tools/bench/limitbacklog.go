package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
)

// limitBacklogResult is what a rate limit costs while a backlog waits for
// it: a `worker run` process at its defaults, one rate limit on the
// backlog's kind, a large backlog against a small one (-mode
// limits-backlog).
type limitBacklogResult struct {
	Rate    int     `json:"limit_wait_rate"`
	Backlog int     `json:"limit_wait_backlog"`
	Small   int     `json:"limit_wait_backlog_small"`
	Seconds float64 `json:"limit_wait_seconds"`
	// Starts is how many jobs started (completed, on the worker's
	// /metrics) in the window; Utilization is Starts against the rate.
	Starts      int     `json:"limit_wait_starts"`
	Utilization float64 `json:"limit_rate_utilization_backlog"`
	// WritesPerSec is the rows inserted, updated and deleted in river_job
	// and ferry's limit tables (pg_stat_user_tables) per second of the
	// window, and WritesPerStart per job started (null when none did).
	WritesPerSec   float64  `json:"limit_wait_writes_per_sec"`
	WritesPerStart *float64 `json:"limit_wait_writes_per_start"`
	// DBCPUShare is the database's share of the machine's CPU in the
	// window (the machine's CPU less the worker's and the bench's, over
	// the window times the cores); DBCPUPerStartMS is its CPU per job
	// started, with the backlog and with the small one, and DBCPURatio the
	// one against the other (null when a run started none).
	DBCPUShare           float64  `json:"limit_wait_db_cpu_share"`
	DBCPUPerStartMS      *float64 `json:"limit_wait_db_cpu_ms_per_start"`
	SmallStarts          int      `json:"limit_wait_starts_small"`
	SmallDBCPUPerStartMS *float64 `json:"limit_wait_db_cpu_ms_per_start_small"`
	DBCPURatio           *float64 `json:"limit_wait_db_cpu_ratio"`
}

// limitBacklogBench runs the large backlog, then the small one.
func limitBacklogBench(ctx context.Context, serverURL string, backlog, small, rate int, dur time.Duration) (limitBacklogResult, error) {
	r := limitBacklogResult{Rate: rate, Backlog: backlog, Small: small, Seconds: dur.Seconds()}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	large, err := limitBacklogRun(ctx, serverURL, bin, dir, backlog, rate, dur)
	if err != nil {
		return r, fmt.Errorf("%d waiting: %w", backlog, err)
	}
	fmt.Fprintf(os.Stderr, "limits-backlog: %d waiting under %d/s for %s: %d started (%.2f of the rate); %.0f row writes/s, the database at %.2f of the machine's CPU\n",
		backlog, rate, dur, large.starts, float64(large.starts)/(float64(rate)*large.elapsed.Seconds()), float64(large.writes)/dur.Seconds(), large.dbShare(dur))
	// The small backlog holds at least small jobs waiting to the window's
	// end: small, plus what the rate starts in the warm-up and the window.
	little, err := limitBacklogRun(ctx, serverURL, bin, dir, small+rate*int((dur+15*time.Second).Seconds()), rate, dur)
	if err != nil {
		return r, fmt.Errorf("%d waiting: %w", small, err)
	}
	fmt.Fprintf(os.Stderr, "limits-backlog: %d waiting: %d started; %.0f row writes/s, the database at %.2f of the machine's CPU\n",
		small, little.starts, float64(little.writes)/dur.Seconds(), little.dbShare(dur))
	r.Starts, r.SmallStarts = large.starts, little.starts
	r.Utilization = float64(large.starts) / (float64(rate) * large.elapsed.Seconds())
	r.WritesPerSec, r.DBCPUShare = float64(large.writes)/dur.Seconds(), large.dbShare(dur)
	if large.starts > 0 {
		r.WritesPerStart = ptr(float64(large.writes) / float64(large.starts))
		r.DBCPUPerStartMS = ptr(large.dbCPUPerStartMS())
	}
	if little.starts > 0 {
		r.SmallDBCPUPerStartMS = ptr(little.dbCPUPerStartMS())
		if r.DBCPUPerStartMS != nil {
			r.DBCPURatio = ptr(*r.DBCPUPerStartMS / *r.SmallDBCPUPerStartMS)
		}
	}
	return r, nil
}

type limitBacklogWindow struct {
	elapsed time.Duration // between the two reads of the starts
	starts  int
	writes  int64
	dbCPU   time.Duration
}

func (w limitBacklogWindow) dbCPUPerStartMS() float64 {
	return float64(w.dbCPU.Microseconds()) / 1000 / float64(w.starts)
}

func (w limitBacklogWindow) dbShare(dur time.Duration) float64 {
	return w.dbCPU.Seconds() / (dur.Seconds() * float64(runtime.NumCPU()))
}

// limitWrites is the rows written to river_job and ferry's limit tables
// so far, as the statistics collector has them.
const limitWrites = `SELECT coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::bigint FROM pg_stat_user_tables
WHERE relname = 'river_job' OR relname LIKE 'ferry_limit%'`

// limitBacklogRun writes n no-op jobs, starts a `worker run` at its
// defaults with a rate limit of rate/s on them (it parks them behind the
// limit as it starts), lets it warm up 5 s after its first start, and
// measures a window of dur: the jobs its /metrics counts completed, the
// rows written (read from pg_stat_user_tables, which each backend brings
// up to date at least every second while it works), and the machine's
// CPU less the worker's and the bench's.
func limitBacklogRun(ctx context.Context, serverURL, bin, dir string, n, rate int, dur time.Duration) (limitBacklogWindow, error) {
	var w limitBacklogWindow
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return w, err
	}
	defer drop()
	// The limit is registered as a running worker registers it, before
	// the backlog is written: each job parks behind it as it is inserted,
	// as jobs inserted while ferry runs do.
	if _, err := pool.Exec(ctx, `INSERT INTO ferry_limit (name, kind, rate_count, rate_period, burst) VALUES ('backlog', $1, $2, '1 second', 1)`,
		jobs.NoopArgs{}.Kind(), rate); err != nil {
		return w, err
	}
	if _, err := pool.Exec(ctx, `SELECT setval('ferry_limit_on', 1, true)`); err != nil {
		return w, err
	}
	if err := backlogSettled(ctx, pool, n, nil); err != nil {
		return w, err
	}
	// Settled as a backlog that built up over time is: vacuumed and
	// analysed, not vacuumed by autovacuum in the measured window.
	if _, err := pool.Exec(ctx, `VACUUM (ANALYZE) river_job`); err != nil {
		return w, fmt.Errorf("vacuum the backlog: %w", err)
	}
	cfg := filepath.Join(dir, "limits-backlog.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, "limits:\n  - {name: backlog, kind: %s, rate: %d/s}\n", jobs.NoopArgs{}.Kind(), rate), 0o600); err != nil {
		return w, err
	}
	addr, err := freeAddr()
	if err != nil {
		return w, err
	}
	p, err := fleet.Start(bin, []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_ADMIN_ADDR=" + addr,
		"FERRY_CONFIG=" + cfg, "FERRY_LOG_LEVEL=warn"}, nil, "run")
	if err != nil {
		return w, err
	}
	defer stopProc(p)
	metrics := "http://" + addr + "/metrics"
	var at [2]time.Time
	mark := func() (starts int, writes int64, cpu cpuUse, err error) {
		if starts, err = completedOnMetrics(ctx, metrics, jobs.NoopArgs{}.Kind()); err != nil {
			return
		}
		at[0], at[1] = at[1], time.Now()
		if err = pool.QueryRow(ctx, limitWrites).Scan(&writes); err != nil {
			return
		}
		cpu, err = readCPU(p.Pid())
		if err == nil {
			var self cpuUse
			self, err = readCPU(0)
			cpu.machine -= self.proc
		}
		return
	}
	// The worker parks the backlog behind the limit before it starts
	// (its first start under the limit): wait for its first completion,
	// then warm up.
	for deadline := time.Now().Add(5 * time.Minute); ; {
		if _, _, _, err := mark(); err == nil {
			break
		} else if time.Now().After(deadline) {
			return w, fmt.Errorf("the worker completed no job in 5 minutes: %w (worker: %s)", err, tail(p))
		}
		if err := loop.Sleep(ctx, time.Second); err != nil {
			return w, err
		}
	}
	if err := loop.Sleep(ctx, 5*time.Second); err != nil {
		return w, err
	}
	s0, w0, c0, err := mark()
	if err != nil {
		return w, fmt.Errorf("%w (worker: %s)", err, tail(p))
	}
	if err := loop.Sleep(ctx, dur); err != nil {
		return w, err
	}
	s1, w1, c1, err := mark()
	if err != nil {
		return w, fmt.Errorf("%w (worker: %s)", err, tail(p))
	}
	w.starts, w.writes, w.elapsed = s1-s0, w1-w0, at[1].Sub(at[0])
	w.dbCPU = (c1.machine - c0.machine) - (c1.proc - c0.proc)
	if w.writes == 0 {
		return w, fmt.Errorf("nothing written in %s: the statistics did not move (worker: %s)", dur, strings.ReplaceAll(tail(p), "\n", " | "))
	}
	return w, nil
}
