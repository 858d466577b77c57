package workflowcap

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/workflow"
)

var (
	workflowsDesc = prometheus.NewDesc("ferry_workflows",
		"Workflows by state: running, completed, failed, cancelled (read at scrape time, cached 5s).",
		[]string{"state"}, nil)
	stepsDesc = prometheus.NewDesc("ferry_workflow_steps",
		"Steps of running workflows by state: their job's River state while it has not ended (pending while it waits for a dependency), then how it ended (read at scrape time, cached 5s).",
		[]string{"state"}, nil)
)

// stepStates are the states ferry_workflow_steps always reports, zeros
// included.
var stepStates = []string{"pending", "available", "scheduled", "running", "retryable", "completed", "cancelled", "discarded", "deleted"}

type collector struct {
	pool  *pgxpool.Pool
	cache *metrics.ReadCache
	delay prometheus.Histogram
}

func newMetrics(pool *pgxpool.Pool, log *slog.Logger) *collector {
	c := &collector{pool: pool, delay: prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "ferry_workflow_step_start_delay_seconds",
		Help:    "Delay from the completion of a step's last dependency (the transaction that released it) to the step's start (its fetch), for steps started by this process.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	})}
	c.cache = metrics.NewReadCache("workflows", 5*time.Second, c.read, log)
	return c
}

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- workflowsDesc
	ch <- stepsDesc
	c.delay.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	c.cache.Collect(ch)
	c.delay.Collect(ch)
}

func (c *collector) read() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	wf := map[string]float64{}
	for _, s := range workflow.States {
		wf[s] = 0
	}
	st := map[string]float64{}
	for _, s := range stepStates {
		st[s] = 0
	}
	var (
		state string
		n     float64
	)
	rows, _ := c.pool.Query(ctx, `SELECT state, count(*) FROM ferry_workflow GROUP BY state`)
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { wf[state] = n; return nil }); err != nil {
		return nil, err
	}
	rows, _ = c.pool.Query(ctx, `SELECT coalesce(s.outcome, j.state::text, 'deleted'), count(*)
FROM ferry_workflow w
JOIN ferry_workflow_step s ON s.workflow_id = w.id
LEFT JOIN river_job j ON j.id = s.job_id AND s.outcome IS NULL
WHERE w.state = 'running'
GROUP BY 1`)
	if _, err := pgx.ForEachRow(rows, []any{&state, &n}, func() error { st[state] = n; return nil }); err != nil {
		return nil, err
	}
	out := make([]prometheus.Metric, 0, len(wf)+len(st))
	for s, v := range wf {
		out = append(out, prometheus.MustNewConstMetric(workflowsDesc, prometheus.GaugeValue, v, s))
	}
	for s, v := range st {
		out = append(out, prometheus.MustNewConstMetric(stepsDesc, prometheus.GaugeValue, v, s))
	}
	return out, nil
}
