package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"time"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
)

// countsResult is how long the counts an operator reads take with
// millions of jobs in river_job.
type countsResult struct {
	Jobs int `json:"counts_jobs"`
	// ConsoleMS is the slowest of ferry's counts (enqueue queues, the
	// console's summary, workers and outbox), each the median of its
	// runs: the key console_counts_ms_5m at 5 million jobs.
	ConsoleMS float64 `json:"console_counts_ms"`
	// EachMS is each count's median.
	EachMS map[string]float64 `json:"counts_ms"`
	// RiverUIMS is the slowest of River UI's own counts (its states and
	// queues endpoints), for reference: ferry serves River UI, it does not
	// write its queries.
	RiverUIMS float64 `json:"riverui_counts_ms"`
	// MetricsFirstScrapeMS is the first /metrics scrape, which also counts
	// the finished jobs (once a minute); MetricsScrapeMS a later one,
	// which counts only the waiting and running ones.
	MetricsFirstScrapeMS float64 `json:"metrics_first_scrape_ms"`
	MetricsScrapeMS      float64 `json:"metrics_scrape_ms"`
}

// countsAtScale fills a scratch database with n finished jobs (in three
// queues, 1 in 100 discarded, finished over the last day) and 5,000
// waiting ones, starts a ferry server on it with its console, and times
// each count an operator reads, runs times each after a first warm-up.
func countsAtScale(ctx context.Context, serverURL string, n, runs int) (countsResult, error) {
	res := countsResult{Jobs: n, EachMS: map[string]float64{}}
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()
	if err := fillFinished(ctx, pool, n); err != nil {
		return res, err
	}
	if _, err := pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
		SELECT '{}', 'ferry.noop', 25, 'default', CASE WHEN g % 2 = 0 THEN 'available' ELSE 'scheduled' END::river_job_state, now() + interval '1 hour'
		FROM generate_series(1, 5000) g`); err != nil {
		return res, fmt.Errorf("fill river_job: %w", err)
	}
	if _, err := pool.Exec(ctx, "ANALYZE river_job"); err != nil {
		return res, err
	}

	const token = "bench-counts-token-0123456789abcdef"
	// No queue worked: the 5,000 waiting jobs stay waiting.
	srv, stop, err := startServer(ctx, ferry.Config{
		Logger: slog.New(slog.DiscardHandler), Database: ferry.DatabaseConfig{URL: pool.Config().ConnString()}, Queues: ferry.QueuesConfig{Workers: map[string]int{"bench-idle": 1}}, Admin: ferry.AdminConfig{Addr: "127.0.0.1:0", Token: token}})
	if err != nil {
		return res, err
	}
	defer stop()
	base := "http://" + srv.AdminAddr()
	get := func(path string) func(context.Context) error {
		return func(ctx context.Context) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			_, _ = io.Copy(io.Discard, resp.Body)
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("GET %s: %s", path, resp.Status)
			}
			return nil
		}
	}
	first, err := timeOnce(ctx, get("/metrics"))
	if err != nil {
		return res, err
	}
	res.MetricsFirstScrapeMS = first
	time.Sleep(6 * time.Second) // past the 5 s cache: the next scrape reads again
	if res.MetricsScrapeMS, err = timeOnce(ctx, get("/metrics")); err != nil {
		return res, err
	}

	ferryCounts := map[string]func(context.Context) error{
		"enqueue_queues":  func(ctx context.Context) error { _, err := jobs.ListQueues(ctx, pool); return err },
		"console_summary": get("/admin/api/summary"),
		"console_workers": get("/admin/api/workers"),
		"console_outbox":  get("/admin/api/outbox"),
	}
	riverUI := map[string]func(context.Context) error{
		"riverui_states": get("/riverui/api/states"),
		"riverui_queues": get("/riverui/api/queues"),
	}
	for _, set := range []map[string]func(context.Context) error{ferryCounts, riverUI} {
		for _, name := range slices.Sorted(maps.Keys(set)) {
			ms, err := medianTime(ctx, set[name], runs)
			if err != nil {
				return res, fmt.Errorf("%s: %w", name, err)
			}
			res.EachMS[name] = ms
		}
	}
	for name := range ferryCounts {
		res.ConsoleMS = max(res.ConsoleMS, res.EachMS[name])
	}
	for name := range riverUI {
		res.RiverUIMS = max(res.RiverUIMS, res.EachMS[name])
	}
	return res, nil
}

// timeOnce times one call of fn, in ms.
func timeOnce(ctx context.Context, fn func(context.Context) error) (float64, error) {
	start := time.Now()
	if err := fn(ctx); err != nil {
		return 0, err
	}
	return float64(time.Since(start).Microseconds()) / 1000, nil
}

// medianTime calls fn once to warm up, then runs times, and returns the
// median in ms.
func medianTime(ctx context.Context, fn func(context.Context) error, runs int) (float64, error) {
	if err := fn(ctx); err != nil {
		return 0, err
	}
	var ms []float64
	for range runs {
		v, err := timeOnce(ctx, fn)
		if err != nil {
			return 0, err
		}
		ms = append(ms, v)
	}
	return pct(ms, 50), nil
}
