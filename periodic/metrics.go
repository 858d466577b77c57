package periodic

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

var lastTickDesc = prometheus.NewDesc("ferry_schedule_last_tick_age_seconds",
	"Seconds since each durable schedule's last tick (enqueued or skipped), read from ferry_schedule at scrape time; absent for a schedule that never ticked.",
	[]string{"schedule", "name"}, nil)

// lastTickCollector reads ferry_schedule at scrape time, so every replica
// reports it, leader or not.
type lastTickCollector struct {
	pool *pgxpool.Pool
	log  *slog.Logger
}

func (c *lastTickCollector) Describe(ch chan<- *prometheus.Desc) { ch <- lastTickDesc }

func (c *lastTickCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, "SELECT id, name, extract(epoch FROM now() - last_tick_at)::float8 FROM ferry_schedule WHERE last_tick_at IS NOT NULL")
	if err != nil {
		c.log.Warn("metrics: read ferry_schedule", "error", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, name string
			age      float64
		)
		if err := rows.Scan(&id, &name, &age); err != nil {
			c.log.Warn("metrics: read ferry_schedule", "error", err)
			return
		}
		ch <- prometheus.MustNewConstMetric(lastTickDesc, prometheus.GaugeValue, age, id, name)
	}
}
