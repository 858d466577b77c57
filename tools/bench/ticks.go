package main

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/jobs"
	"github.com/ferryq/ferry/periodic"
)

// tickResult is the scheduler's tick lag: from a tick's time to its job's
// insert being committed (the "periodic: tick enqueued" line) and to the
// job's start (river_job.attempted_at), on a worker busy with other jobs.
type tickResult struct {
	Ticks          int     `json:"ticks"`
	Schedules      int     `json:"schedules"`
	LoadJobsPerSec int     `json:"load_jobs_per_sec"`
	InsertP50MS    float64 `json:"tick_lag_insert_p50_ms"`
	InsertP99MS    float64 `json:"tick_lag_insert_p99_ms"`
	StartP50MS     float64 `json:"tick_lag_start_p50_ms"`
	StartP99MS     float64 `json:"tick_lag_start_p99_ms"`
}

// tickLog records when each "periodic: tick enqueued" line was written.
type tickLog struct {
	slog.Handler
	mu  *sync.Mutex
	lag *[]time.Duration
}

func (h tickLog) Enabled(context.Context, slog.Level) bool { return true }

func (h tickLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "periodic: tick enqueued" {
		return nil
	}
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "tick" {
			if t, ok := a.Value.Any().(time.Time); ok {
				h.mu.Lock()
				*h.lag = append(*h.lag, r.Time.Sub(t))
				h.mu.Unlock()
			}
		}
		return true
	})
	return nil
}

func (h tickLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h tickLog) WithGroup(string) slog.Handler      { return h }

func tickLag(ctx context.Context, serverURL string, schedules int, dur time.Duration, load int) (tickResult, error) {
	res := tickResult{Schedules: schedules, LoadJobsPerSec: load}
	pool, drop, err := scratch(ctx, serverURL)
	if err != nil {
		return res, err
	}
	defer drop()
	var (
		mu        sync.Mutex
		insertLag []time.Duration
	)
	var scheds []periodic.Schedule
	for i := range schedules {
		scheds = append(scheds, periodic.Schedule{
			ID: fmt.Sprintf("bench-%02d", i), Trigger: periodic.Every(time.Second),
			Args: jobs.NoopArgs{}, Overlap: periodic.OverlapAllow,
		})
	}
	_, stop, err := startServer(ctx, ferry.Config{
		Database:  ferry.DatabaseConfig{URL: pool.Config().ConnString() + "&pool_max_conns=60"},
		Leader:    ferry.LeaderConfig{Tick: time.Second, StandbyProbe: time.Second},
		Admin:     ferry.AdminConfig{Addr: "off"},
		Schedules: scheds,
		Logger:    slog.New(tickLog{mu: &mu, lag: &insertLag}),
	})
	if err != nil {
		return res, err
	}
	defer stop()

	// The load: jobs that keep the workers busy while the ticks come.
	ins, err := jobs.NewInserter(pool)
	if err != nil {
		return res, err
	}
	loadCtx, stopLoad := context.WithTimeout(ctx, dur)
	defer stopLoad()
	var loadWG sync.WaitGroup
	loadWG.Go(func() {
		t := time.NewTicker(time.Second / time.Duration(max(load, 1)))
		defer t.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
				_, _ = ins.Client().Insert(loadCtx, jobs.NoopArgs{Sleep: jobs.Duration(20 * time.Millisecond)}, &river.InsertOpts{})
			}
		}
	})
	loadWG.Wait()
	time.Sleep(time.Second) // let the last ticks' jobs start

	rows, err := pool.Query(ctx, `SELECT extract(epoch FROM attempted_at - (metadata->>'ferry_tick')::timestamptz) * 1000
		FROM river_job WHERE metadata ? 'ferry_tick' AND attempted_at IS NOT NULL`)
	if err != nil {
		return res, err
	}
	var start []float64
	for rows.Next() {
		var ms float64
		if err := rows.Scan(&ms); err != nil {
			return res, err
		}
		start = append(start, ms)
	}
	rows.Close()
	mu.Lock()
	ins2 := make([]float64, 0, len(insertLag))
	for _, d := range insertLag {
		ins2 = append(ins2, float64(d.Microseconds())/1000)
	}
	mu.Unlock()
	res.Ticks = len(ins2)
	res.InsertP50MS, res.InsertP99MS = pct(ins2, 50), pct(ins2, 99)
	res.StartP50MS, res.StartP99MS = pct(start, 50), pct(start, 99)
	return res, nil
}

func pct(xs []float64, p int) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
