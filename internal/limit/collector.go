package limit

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/internal/metrics"
)

// maxLimitKeys bounds the keys reported per limit (the busiest): a limit
// keyed by tenant must not give Prometheus a series per tenant ever seen.
const maxLimitKeys = 100

var (
	limitInUseDesc = prometheus.NewDesc("ferry_limit_in_use",
		"Use of a limit now, per key with any use or waiting job (the busiest 100): slots held for a concurrency limit, tokens spent for a rate-only limit (read at scrape time, cached 2s).",
		[]string{"limit", "key"}, nil)
	limitWaitingDesc = prometheus.NewDesc("ferry_limit_waiting",
		"Jobs waiting for a limit, per key with any use or waiting job (the busiest 100) (read at scrape time, cached 2s).",
		[]string{"limit", "key"}, nil)
)

// LimitCollector reports the use of the config file's limits from the
// database, the same on every replica.
type LimitCollector struct {
	pool  *pgxpool.Pool
	cache *metrics.ReadCache
}

// NewLimitCollector returns a collector over pool.
func NewLimitCollector(pool *pgxpool.Pool, log *slog.Logger) *LimitCollector {
	c := &LimitCollector{pool: pool}
	c.cache = metrics.NewReadCache("limits", 2*time.Second, c.read, log)
	return c
}

// Describe implements prometheus.Collector.
func (c *LimitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- limitInUseDesc
	ch <- limitWaitingDesc
}

// Collect implements prometheus.Collector.
func (c *LimitCollector) Collect(ch chan<- prometheus.Metric) { c.cache.Collect(ch) }

func (c *LimitCollector) read() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	limits, err := List(ctx, c.pool)
	if err != nil {
		return nil, err
	}
	var out []prometheus.Metric
	for _, l := range limits {
		keys := l.Keys[:min(len(l.Keys), maxLimitKeys)]
		if len(keys) == 0 {
			keys = []KeyStatus{{}} // an idle limit reads 0, not absent
		}
		for _, k := range keys {
			inUse := k.Running
			if l.Concurrency == 0 {
				inUse = k.Tokens
			}
			out = append(out,
				prometheus.MustNewConstMetric(limitInUseDesc, prometheus.GaugeValue, float64(inUse), l.Name, k.Key),
				prometheus.MustNewConstMetric(limitWaitingDesc, prometheus.GaugeValue, float64(k.Waiting), l.Name, k.Key))
		}
	}
	return out, nil
}
