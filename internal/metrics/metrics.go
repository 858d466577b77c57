// Package metrics holds ferry's Prometheus registry: build info, River jobs by
// queue and state and the length of bounded queues (read at scrape time,
// cached briefly), job durations by kind (a River worker middleware), and
// the inserts refused by a full queue (a River insert middleware).
package metrics

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/jobs"
)

// Metrics is one process's registry and the collectors ferry feeds.
type Metrics struct {
	Registry *Registry

	jobDuration *prometheus.HistogramVec
	queueFull   *prometheus.CounterVec
	logger      *slog.Logger
}

// New returns a registry with Go, process and build-info collectors and the
// River job collectors reading pool. logger may be nil.
func New(pool *pgxpool.Pool, version string, logger *slog.Logger) *Metrics {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	reg := NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "ferry_build_info",
		Help:        "Always 1; the labels say which build of ferry runs.",
		ConstLabels: prometheus.Labels{"version": version, "go_version": runtime.Version()},
	})
	build.Set(1)
	m := &Metrics{
		Registry: reg,
		jobDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ferry_job_duration_seconds",
			Help:    "Time this process spent working a job, by kind and outcome (completed, failed, cancelled, snoozed, interrupted).",
			Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300},
		}, []string{"kind", "outcome"}),
		queueFull: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_queue_full_total",
			Help: "Inserts through this process's River client (the scheduler's, the outbox relay's, an embedder's) refused because their queue was at its bound.",
		}, []string{"queue"}),
		logger: logger,
	}
	reg.MustRegister(build, m.jobDuration, m.queueFull, &jobsCollector{pool: pool, logger: logger, ttl: 5 * time.Second, finalTTL: time.Minute})
	return m
}

// Middleware returns the River middleware that times every job and logs
// its outcome: completed at debug level (a busy queue works thousands a
// second), snoozed and interrupted (cut off by shutdown) at info, failed and
// cancelled at warn with the error. On inserts it counts those a full queue
// refused (ferry_queue_full_total).
func (m *Metrics) Middleware() rivertype.Middleware { return &workMiddleware{m: m} }

type workMiddleware struct {
	river.MiddlewareDefaults
	m *Metrics
}

var _ rivertype.JobInsertMiddleware = (*workMiddleware)(nil)

func (w *workMiddleware) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	res, err := doInner(ctx)
	var qf *jobs.QueueFullError
	if errors.As(jobs.AsQueueFull(err), &qf) {
		w.m.queueFull.WithLabelValues(qf.Queue).Inc()
	}
	return res, err
}

func (w *workMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	start := time.Now()
	err := doInner(ctx)
	elapsed := time.Since(start)
	out := outcome(err)
	if out == "failed" && ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// Cut off by a stopping worker (or a remote cancel): River puts
		// the job back without counting the attempt. Not a failure.
		out = "interrupted"
	}
	w.m.jobDuration.WithLabelValues(job.Kind, out).Observe(elapsed.Seconds())
	switch {
	case err == nil:
		if w.m.logger.Enabled(ctx, slog.LevelDebug) {
			w.m.logger.Debug("job: completed", "kind", job.Kind, "job_id", job.ID, "queue", job.Queue, "attempt", job.Attempt, "duration", elapsed)
		}
	case out == "snoozed" || out == "interrupted":
		w.m.logger.Info("job: "+out, "kind", job.Kind, "job_id", job.ID, "attempt", job.Attempt)
	default:
		w.m.logger.Warn("job: "+out, "kind", job.Kind, "job_id", job.ID, "queue", job.Queue, "attempt", job.Attempt, "max_attempts", job.MaxAttempts, "duration", elapsed, "error", err)
	}
	return err
}

func outcome(err error) string {
	var (
		cancel *rivertype.JobCancelError
		snooze *rivertype.JobSnoozeError
	)
	switch {
	case err == nil:
		return "completed"
	case errors.As(err, &cancel):
		return "cancelled"
	case errors.As(err, &snooze):
		return "snoozed"
	}
	return "failed"
}

const jobsHelp = "River jobs in the database by queue and state: available, scheduled, retryable, pending and running read at scrape time (cached for 5s); completed, cancelled and discarded at most once a minute."

var jobsDesc = prometheus.NewDesc("ferry_jobs", jobsHelp, []string{"queue", "state"}, nil)
var jobsUpDesc = prometheus.NewDesc("ferry_jobs_scrape_ok", "1 when the last read of river_job for ferry_jobs succeeded.", nil, nil)
var queueLengthDesc = prometheus.NewDesc("ferry_queue_length", "Jobs available, scheduled, retryable, pending and running in each bounded queue, as its bound counts them (read at scrape time, cached for 5s).", []string{"queue"}, nil)

// jobsCollector counts river_job rows by queue and state. The states a
// job waits or runs in are counted on River's fetch index (state first):
// a few thousand rows, milliseconds however large the table (11 to 20 ms
// with 5,000 of them among 5 million finished jobs). The finished states
// are most of a large table, and counting them reads it all (1.8 s at 5
// million jobs, against a 3 s timeout when every state was counted at
// each scrape): they are counted at most every finalTTL, with a timeout of
// their own, and the last counts are reported meanwhile. The cache keeps
// frequent scrapes from many replicas from repeating either.
type jobsCollector struct {
	pool     *pgxpool.Pool
	logger   *slog.Logger
	ttl      time.Duration
	finalTTL time.Duration

	mu      sync.Mutex
	at      time.Time
	counts  []jobCount // waiting and running states
	finalAt time.Time
	final   []jobCount // finished states
	// lengths are the bounded queues' lengths.
	lengths []jobs.QueueLength
	ok      bool
}

type jobCount struct {
	queue, state string
	n            int64
}

func (c *jobsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- jobsDesc
	ch <- jobsUpDesc
	ch <- queueLengthDesc
}

func (c *jobsCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > c.ttl {
		c.refresh()
	}
	for _, jc := range slices.Concat(c.counts, c.final) {
		ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(jc.n), jc.queue, jc.state)
	}
	for _, ql := range c.lengths {
		ch <- prometheus.MustNewConstMetric(queueLengthDesc, prometheus.GaugeValue, float64(ql.Length), ql.Queue)
	}
	up := 0.0
	if c.ok {
		up = 1
	}
	ch <- prometheus.MustNewConstMetric(jobsUpDesc, prometheus.GaugeValue, up)
}

// The two reads of jobsCollector.
const (
	liveCountsSQL = `SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('available', 'scheduled', 'retryable', 'pending', 'running')
		GROUP BY queue, state ORDER BY queue, state`
	finalCountsSQL = `SELECT queue, state::text, count(*) FROM river_job
		WHERE state IN ('completed', 'cancelled', 'discarded')
		GROUP BY queue, state ORDER BY queue, state`
)

func (c *jobsCollector) refresh() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c.at = time.Now()
	counts, err := countJobs(ctx, c.pool, liveCountsSQL)
	var lengths []jobs.QueueLength
	if err == nil {
		lengths, err = jobs.QueueLengths(ctx, c.pool)
	}
	if err != nil {
		c.ok = false
		c.logger.Warn("metrics: count river_job", "error", err)
		return
	}
	c.counts, c.lengths, c.ok = counts, lengths, true
	if time.Since(c.finalAt) < c.finalTTL {
		return
	}
	fctx, fcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer fcancel()
	c.finalAt = time.Now()
	final, err := countJobs(fctx, c.pool, finalCountsSQL)
	if err != nil {
		c.ok = false
		c.logger.Warn("metrics: count finished river_job rows", "error", err)
		return
	}
	c.final = final
}

// countJobs runs one of the collector's reads.
func countJobs(ctx context.Context, pool *pgxpool.Pool, sql string) ([]jobCount, error) {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (jobCount, error) {
		var jc jobCount
		return jc, row.Scan(&jc.queue, &jc.state, &jc.n)
	})
}

// Name is "metrics": the Metrics are a capability too (capability.Build).
func (m *Metrics) Name() string { return "metrics" }

// Build records the metrics middleware, which times every job by kind and
// outcome (ferry_job_duration_seconds).
func (m *Metrics) Build(b *capability.Build) error {
	b.Middleware(capability.LayerObserve, m.Middleware())
	return nil
}
