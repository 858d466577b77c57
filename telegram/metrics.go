package telegram

import "github.com/prometheus/client_golang/prometheus"

// Metric names (each labelled with bot; never with anything of the token).
const (
	metricPolling      = "ferry_telegram_polling"
	metricStored       = "ferry_telegram_updates_stored_total"
	metricLastUpdateID = "ferry_telegram_last_update_id"
	metricErrors       = "ferry_telegram_errors_total"
)

const (
	helpPolling      = "1 while this process is the bot's getUpdates consumer (polling or backing off), else 0."
	helpStored       = "Updates this process stored as outbox messages (redeliveries and malformed updates not counted)."
	helpLastUpdateID = "The newest update_id stored, as this process last wrote or read it; absent before any."
	helpErrors       = "Errors of this process's poller, by kind (unauthorized, conflict, rate_limited, server, bad_request, transport, malformed, fence, database)."
)

// botDescs are a bot's metric descriptions: the bot is a constant label, so
// the collectors of several bots register in one registry side by side.
type botDescs struct {
	polling, stored, lastUpdateID, errors *prometheus.Desc
}

func newBotDescs(bot string) botDescs {
	l := prometheus.Labels{"bot": bot}
	return botDescs{
		polling:      prometheus.NewDesc(metricPolling, helpPolling, nil, l),
		stored:       prometheus.NewDesc(metricStored, helpStored, nil, l),
		lastUpdateID: prometheus.NewDesc(metricLastUpdateID, helpLastUpdateID, nil, l),
		errors:       prometheus.NewDesc(metricErrors, helpErrors, []string{"kind"}, l),
	}
}

// pollerCollector reports one poller's metrics from its state at scrape
// time.
type pollerCollector struct {
	p *Poller
	d botDescs
}

func newPollerCollector(p *Poller) *pollerCollector {
	return &pollerCollector{p: p, d: newBotDescs(p.cfg.Bot)}
}

func (c *pollerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.d.polling
	ch <- c.d.stored
	ch <- c.d.lastUpdateID
	ch <- c.d.errors
}

func (c *pollerCollector) Collect(ch chan<- prometheus.Metric) {
	c.p.mu.Lock()
	st := c.p.status
	stored := c.p.stored
	errs := make(map[string]int64, len(c.p.errCount))
	for k, v := range c.p.errCount {
		errs[k] = v
	}
	c.p.mu.Unlock()

	polling := 0.0
	if st.State == StatePolling || st.State == StateBackingOff {
		polling = 1
	}
	ch <- prometheus.MustNewConstMetric(c.d.polling, prometheus.GaugeValue, polling)
	ch <- prometheus.MustNewConstMetric(c.d.stored, prometheus.CounterValue, float64(stored))
	if st.LastUpdateID > 0 {
		ch <- prometheus.MustNewConstMetric(c.d.lastUpdateID, prometheus.GaugeValue, float64(st.LastUpdateID))
	}
	for _, kind := range errorKinds {
		ch <- prometheus.MustNewConstMetric(c.d.errors, prometheus.CounterValue, float64(errs[kind]), kind)
	}
}

// OffCollector reports a bot whose token is not set (no poller):
// ferry_telegram_polling 0. Register it where the bot's poller would have
// registered its metrics.
func OffCollector(bot string) prometheus.Collector { return offCollector{d: newBotDescs(bot)} }

type offCollector struct{ d botDescs }

func (c offCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.d.polling }

func (c offCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(c.d.polling, prometheus.GaugeValue, 0)
}
