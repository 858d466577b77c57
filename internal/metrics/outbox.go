package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
)

var (
	outboxMessagesDesc   = prometheus.NewDesc("ferry_outbox_messages", "Outbox messages by status (read at scrape time, cached 5s).", []string{"status"}, nil)
	outboxDeliveriesDesc = prometheus.NewDesc("ferry_outbox_deliveries", "Outbox deliveries by route and status (read at scrape time, cached 5s).", []string{"route", "status"}, nil)
)

// OutboxCollector reports outbox messages and deliveries by status, from
// the database, on every replica. It lives here rather than in package
// outbox so that a service importing outbox to write messages does not link
// the Prometheus client.
type OutboxCollector struct {
	pool  *pgxpool.Pool
	cache *ReadCache
}

// NewOutboxCollector returns a collector over pool.
func NewOutboxCollector(pool *pgxpool.Pool, log *slog.Logger) *OutboxCollector {
	c := &OutboxCollector{pool: pool}
	c.cache = NewReadCache("outbox counts", 5*time.Second, c.read, log)
	return c
}

// Describe implements prometheus.Collector.
func (c *OutboxCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- outboxMessagesDesc
	ch <- outboxDeliveriesDesc
}

// Collect implements prometheus.Collector.
func (c *OutboxCollector) Collect(ch chan<- prometheus.Metric) { c.cache.Collect(ch) }

// ReadCache holds the metrics a collector reads from the database, read
// again at a scrape once they are older than ttl; a failed read keeps the
// last ones and logs a warning. A capability's collector of database
// counts uses one (internal/limit's, the outbox's).
type ReadCache struct {
	what string
	ttl  time.Duration
	read func() ([]prometheus.Metric, error)
	log  *slog.Logger

	mu     sync.Mutex
	at     time.Time
	cached []prometheus.Metric
}

// NewReadCache returns a ReadCache of what read returns, named what in its
// warnings.
func NewReadCache(what string, ttl time.Duration, read func() ([]prometheus.Metric, error), log *slog.Logger) *ReadCache {
	if log == nil {
		log = slog.Default()
	}
	return &ReadCache{what: what, ttl: ttl, read: read, log: log}
}

// Collect sends the cached metrics, read again first when older than the
// cache's ttl.
func (c *ReadCache) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) > c.ttl {
		c.at = time.Now()
		ms, err := c.read()
		if err != nil {
			c.log.Warn("metrics: read "+c.what, "error", err)
		} else {
			c.cached = ms
		}
	}
	for _, m := range c.cached {
		ch <- m
	}
}

func (c *OutboxCollector) read() ([]prometheus.Metric, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	rows, err := c.pool.Query(ctx, `SELECT '', status, count(*) FROM ferry_outbox GROUP BY status
		UNION ALL SELECT route, status, count(*) FROM ferry_outbox_delivery GROUP BY route, status`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []prometheus.Metric
	for rows.Next() {
		var (
			route, status string
			n             int64
		)
		if err := rows.Scan(&route, &status, &n); err != nil {
			return nil, err
		}
		if route == "" {
			out = append(out, prometheus.MustNewConstMetric(outboxMessagesDesc, prometheus.GaugeValue, float64(n), status))
		} else {
			out = append(out, prometheus.MustNewConstMetric(outboxDeliveriesDesc, prometheus.GaugeValue, float64(n), route, status))
		}
	}
	return out, rows.Err()
}
