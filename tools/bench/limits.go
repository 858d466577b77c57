package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/testkit/fleet"
	"github.com/ferryq/ferry/jobs"
)

// limitsResult is -mode limits: concurrency and rate limits enforced by
// real worker processes (`worker run`), measured where it matters, at the
// downstream service the limited jobs call (http.request jobs to a
// receiver in this process that holds each request as long as asked).
type limitsResult struct {
	Workers int `json:"workers"`

	// Concurrency: jobs of JobSeconds each under a limit of Concurrency.
	Concurrency            int     `json:"concurrency"`
	ConcurrencyJobs        int     `json:"concurrency_jobs"`
	JobSeconds             float64 `json:"job_seconds"`
	ConcurrencyUtilization float64 `json:"limit_concurrency_utilization"`
	ConcurrencyMaxInFlight int     `json:"concurrency_max_in_flight"`

	// Rate: instant jobs under a limit of Rate per second, burst Burst.
	Rate            int     `json:"rate_per_sec"`
	Burst           int     `json:"burst"`
	RateJobs        int     `json:"rate_jobs"`
	RateUtilization float64 `json:"limit_rate_utilization"`
	RateMaxInSecond int     `json:"rate_max_in_one_second"`

	// Chaos: the concurrency limit with 1 s jobs while workers are killed
	// with kill -9 and replaced, every 50 ms sampled.
	ChaosJobs    int `json:"chaos_jobs"`
	ChaosKills   int `json:"chaos_kills"`
	ChaosSamples int `json:"chaos_samples"`
	ChaosMax     int `json:"chaos_max_in_flight"`

	// Violations: 50 ms samples over the concurrency (all runs) and
	// one-second windows with more than rate + burst starts.
	Violations int `json:"limit_violations"`
}

// holdReceiver is the downstream service: each request to /hold?ms=N is
// held N ms. It counts requests in flight (the limited jobs' work), keeps
// the exact maximum, samples the count every 50 ms, and records each
// arrival and the held time.
type holdReceiver struct {
	mu       sync.Mutex
	inFlight int
	max      int
	samples  []int
	arrivals []time.Time
	ends     []time.Time
	held     time.Duration
}

func (h *holdReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	now := time.Now()
	h.mu.Lock()
	h.inFlight++
	h.max = max(h.max, h.inFlight)
	h.arrivals = append(h.arrivals, now)
	h.mu.Unlock()
	t := time.NewTimer(time.Duration(ms) * time.Millisecond)
	completed := true
	select {
	case <-t.C:
	case <-r.Context().Done(): // the worker was killed
		t.Stop()
		completed = false
	}
	end := time.Now()
	h.mu.Lock()
	h.inFlight--
	if completed {
		h.held += end.Sub(now)
		h.ends = append(h.ends, end)
	}
	h.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

// sample records the count in flight every 50 ms until ctx ends.
func (h *holdReceiver) sample(ctx context.Context) {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h.mu.Lock()
		h.samples = append(h.samples, h.inFlight)
		h.mu.Unlock()
	}
}

// limitRun is one run: n http.request jobs holding holdMS each, worked by
// workers processes under limitYAML, with kills kill -9s (each worker
// replaced) spread over the run. It returns the receiver once every job
// completed.
func limitRun(ctx context.Context, serverURL, bin, dir, limitYAML string, n, holdMS, workers, kills int) (*holdReceiver, error) {
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return nil, err
	}
	defer drop()
	recv := &holdReceiver{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: recv, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n"+limitYAML), 0o600); err != nil {
		return nil, err
	}
	if err := insertHolds(ctx, pool, fmt.Sprintf("http://%s/hold?ms=%d", ln.Addr(), holdMS), n); err != nil {
		return nil, err
	}

	f := fleet.New()
	defer func() { _ = f.Kill(time.Minute) }()
	env := []string{"DATABASE_URL=" + pool.Config().ConnString(), "FERRY_CONFIG=" + cfg, "FERRY_LOG_FORMAT=json", "FERRY_LOG_LEVEL=warn"}
	// One-second ticks: a killed worker's jobs are rescued in seconds.
	args := []string{"run", "--admin-addr", "off", "--queues", "default=40",
		"--leader-tick", "1s", "--leader-tick-timeout", "300ms", "--standby-probe", "1s"}
	sctx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	go recv.sample(sctx)
	var procs []*fleet.Proc
	for range workers {
		p, err := f.Start(bin, env, args...)
		if err != nil {
			return nil, err
		}
		procs = append(procs, p)
	}
	killed := 0
	deadline := time.Now().Add(10 * time.Minute)
	// Progress is the receiver's count of holds served in full; the
	// database is asked whether every job completed only once that count
	// reaches n, and then at most once a second: the harness does not scan
	// the table the workers fetch from while they work.
	var lastAsked time.Time
	for {
		recv.mu.Lock()
		served := len(recv.ends)
		recv.mu.Unlock()
		if served >= n && time.Since(lastAsked) >= time.Second {
			lastAsked = time.Now()
			var done int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done); err != nil {
				return nil, err
			}
			if done == n {
				break
			}
		}
		if killed < kills && served >= (killed+1)*n/(kills+1) {
			if err := procs[0].Kill(); err != nil {
				return nil, err
			}
			p, err := f.Start(bin, env, args...)
			if err != nil {
				return nil, err
			}
			procs = append(procs[1:], p)
			killed++
		}
		for _, p := range procs {
			if p.Exited() {
				_, stderr := p.Tail(5)
				return nil, fmt.Errorf("worker %s exited: %s", p, stderr)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d jobs' calls served in full after 10 minutes", served, n)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if killed < kills {
		return nil, errors.New("every job completed before the kills: too small a load")
	}
	var waited int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE metadata ? 'ferry_gate' AND attempted_at > created_at + interval '1 second'`).Scan(&waited); err != nil {
		return nil, err
	}
	if waited == 0 {
		return nil, errors.New("no job waited a second behind the limit: it was never reached")
	}
	stopSampling()
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if len(recv.samples) == 0 {
		return nil, errors.New("no sample of the jobs in flight")
	}
	return recv, nil
}

func insertHolds(ctx context.Context, pool *pgxpool.Pool, url string, n int) error {
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		return err
	}
	params := make([]river.InsertManyParams, n)
	for i := range params {
		params[i] = river.InsertManyParams{Args: jobs.HTTPRequestArgs{URL: url, Timeout: jobs.Duration(time.Minute)}}
	}
	_, err = client.InsertMany(ctx, params)
	return err
}

// overSamples counts the samples above limit.
func overSamples(samples []int, limit int) int {
	n := 0
	for _, s := range samples {
		if s > limit {
			n++
		}
	}
	return n
}

// maxInWindow is the most arrivals in any window of length w (each
// window opening at an arrival), and how many windows held more than most.
// a is sorted.
func maxInWindow(a []time.Time, w time.Duration, most int) (top, over int) {
	j := 0
	for i := range a {
		for j < len(a) && a[j].Sub(a[i]) < w {
			j++
		}
		top = max(top, j-i)
		if j-i > most {
			over++
		}
	}
	return top, over
}

func limitsBench(ctx context.Context, serverURL string, workers int) (limitsResult, error) {
	res := limitsResult{Workers: workers, Concurrency: 20, ConcurrencyJobs: 100, JobSeconds: 5, Rate: 10, Burst: 1, RateJobs: 200, ChaosJobs: 300}
	dir, bin, err := buildIntoTemp("./cmd/worker")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	// Concurrency: 100 jobs of 5 s under a limit of 20: ideally 25 s.
	recv, err := limitRun(ctx, serverURL, bin, dir,
		fmt.Sprintf("  - {name: downstream, kind: http.request, concurrency: %d}\n", res.Concurrency),
		res.ConcurrencyJobs, int(res.JobSeconds*1000), workers, 0)
	if err != nil {
		return res, fmt.Errorf("concurrency: %w", err)
	}
	span := slices.MaxFunc(recv.ends, func(a, b time.Time) int { return a.Compare(b) }).Sub(slices.MinFunc(recv.arrivals, func(a, b time.Time) int { return a.Compare(b) }))
	res.ConcurrencyUtilization = recv.held.Seconds() / (float64(res.Concurrency) * span.Seconds())
	res.ConcurrencyMaxInFlight = recv.max
	res.Violations += overSamples(recv.samples, res.Concurrency)
	if recv.max > res.Concurrency {
		res.Violations++
	}

	// Rate: 200 instant jobs at 10/s (burst 1) with a kill mid-run.
	recv, err = limitRun(ctx, serverURL, bin, dir,
		fmt.Sprintf("  - {name: api, kind: http.request, rate: %d/s, burst: %d}\n", res.Rate, res.Burst),
		res.RateJobs, 0, workers, 1)
	if err != nil {
		return res, fmt.Errorf("rate: %w", err)
	}
	a := recv.arrivals
	slices.SortFunc(a, func(x, y time.Time) int { return x.Compare(y) })
	top, over := maxInWindow(a, time.Second, res.Rate+res.Burst)
	res.RateMaxInSecond = top
	res.Violations += over
	res.RateUtilization = float64(len(a)-1) / a[len(a)-1].Sub(a[0]).Seconds() / float64(res.Rate)

	// Chaos: 300 jobs of 1 s under a limit of 20, three workers killed.
	recv, err = limitRun(ctx, serverURL, bin, dir,
		fmt.Sprintf("  - {name: downstream, kind: http.request, concurrency: %d}\n", res.Concurrency),
		res.ChaosJobs, 1000, workers, 3)
	if err != nil {
		return res, fmt.Errorf("chaos: %w", err)
	}
	res.ChaosKills, res.ChaosSamples, res.ChaosMax = 3, len(recv.samples), recv.max
	res.Violations += overSamples(recv.samples, res.Concurrency)
	if recv.max > res.Concurrency {
		res.Violations++
	}
	return res, nil
}

// limitOverhead works a backlog of n no-op jobs with ferry's whole worker
// stack, without limits and under a global concurrency limit it never
// reaches (the cost of taking and giving back a slot for every job), in
// paired rounds, and returns the best rates and the median of the rounds'
// ratios limited/unlimited (limit_throughput_ratio). A River Pro user saw
// throughput halve under a global limit (River #1145).
func limitOverhead(ctx context.Context, serverURL string, n, rounds int) (unlimited, limited, ratio float64, err error) {
	dir, err := os.MkdirTemp("", "ferry-bench-limits-")
	if err != nil {
		return 0, 0, 0, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(cfg, []byte("limits:\n  - {kind: ferry.noop, concurrency: 100000}\n"), 0o600); err != nil {
		return 0, 0, 0, err
	}
	// The limit is registered before the backlog is written, as a running
	// worker's is: each job parks behind it as it is inserted (an insert's
	// cost, measured by -mode counts), and the rounds measure what a
	// worker pays for the limit as it works. (A limit first registered
	// over a backlog parks it once, as the worker starts.)
	register := registerLimits(limit.Limit{Kind: jobs.NoopArgs{}.Kind(), Concurrency: 100000})
	p, err := pairedRounds(rounds,
		func() (float64, error) { return ferryThroughput(ctx, serverURL, n, nil, false) },
		func() (float64, error) {
			return ferryThroughputOf(ctx, serverURL, n, throughputRound{before: register,
				tune: []func(*ferry.Config){func(c *ferry.Config) { c.ConfigFile = cfg }}})
		})
	return p.Base, p.Other, p.Ratio(), err
}

// registerLimits registers ls as a worker whose config file gives them
// does as it starts (limit.Limiter.Register).
func registerLimits(ls ...limit.Limit) func(context.Context, *pgxpool.Pool) error {
	return func(ctx context.Context, pool *pgxpool.Pool) error {
		l, err := limit.New(limit.Config{Pool: pool, Limits: ls})
		if err != nil {
			return err
		}
		return l.Register(ctx)
	}
}
