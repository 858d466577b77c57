// Package broadcastcap is the worker side of broadcast (package broadcast,
// a library module): the capability that gives a ferry server its
// broadcast Broker, on the sessions' database,
// ferry_broadcast_dropped_total, and the leader's announcements to the
// admin consoles of every replica (admin.EventsChannel).
package broadcastcap

import (
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/capability"
)

// Section is the broadcast capability's configuration (ferry.Config's
// Broadcast).
type Section struct {
	// Keys sign and verify this process's broadcast messages (parse with
	// broadcast.ParseKeys): see Server.Broadcast and package broadcast.
	Keys broadcast.Keys `env:"FERRY_BROADCAST_KEYS" flag:"broadcast-keys" secret:"true" usage:"keys that sign (the first) and verify (all) broadcast messages: comma-separated base64, each at least 32 bytes (set it in the environment, not on the command line)"`
}

// Capability is the broadcast capability.
type Capability struct {
	sec    Section
	listen *pgxpool.Config
	tick   time.Duration
	broker *broadcast.Broker
	// releasing holds the leader-release announcements a demotion left
	// running (announcer.leader).
	releasing sync.WaitGroup
}

// New checks sec and returns the capability. sessionURL is where the
// Broker's LISTEN session lives (the sessions' database, which bypasses a
// transaction pooler); tick is the leader tick, which bounds a release's
// announcement.
func New(sec Section, sessionURL string, tick time.Duration) (*Capability, error) {
	// Parsed as a pool URL, so that pool settings (pool_max_conns …) are
	// dropped rather than sent to the server.
	pc, err := pgxpool.ParseConfig(sessionURL)
	if err != nil {
		return nil, fmt.Errorf("ferry: broadcast: session URL: %s", redact.Postgres(err.Error()))
	}
	return &Capability{sec: sec, listen: pc, tick: tick}, nil
}

// Name is "broadcast".
func (*Capability) Name() string { return "broadcast" }

// Broker is the server's Broker, once built.
func (c *Capability) Broker() *broadcast.Broker { return c.broker }

// Close waits for the announcements still on their way, then closes the
// Broker (if built): the server calls it when it closes.
func (c *Capability) Close() {
	c.releasing.Wait()
	if c.broker != nil {
		c.broker.Close()
	}
}

// Build makes the Broker, which opens nothing: its LISTEN session starts
// with its first subscription (an admin console watching live). It
// records ferry_broadcast_dropped_total, and the leader runnables that
// announce to the consoles a change of leader ("broadcast-leader") and of
// stuck deliveries or held locks ("broadcast-console").
func (c *Capability) Build(b *capability.Build) error {
	broker, err := broadcast.New(broadcast.Config{Pool: b.Pool, ListenConfig: c.listen.ConnConfig, Schema: b.Schema, Keys: c.sec.Keys, Logger: b.Logger})
	if err != nil {
		return err
	}
	if err := b.Metrics.Register(collector{broker}); err != nil {
		broker.Close()
		return err
	}
	c.broker = broker
	a := announcer{broker: broker, pool: b.Pool, term: func() int64 { return b.Elector.Term() }, tick: c.tick, logger: b.Logger, releasing: &c.releasing}
	b.Leader("broadcast-leader", a.leader)
	b.Leader("broadcast-console", a.console)
	return nil
}

// collector exports ferry_broadcast_dropped_total{reason}.
type collector struct{ b *broadcast.Broker }

var droppedDesc = prometheus.NewDesc("ferry_broadcast_dropped_total",
	"Broadcast messages this process received and dropped, by reason (unsigned, forged, malformed, overflow, expired, stale, replayed).",
	[]string{"reason"}, nil)

func (c collector) Describe(ch chan<- *prometheus.Desc) { ch <- droppedDesc }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	d := c.b.Dropped()
	for _, r := range broadcast.DropReasons {
		ch <- prometheus.MustNewConstMetric(droppedDesc, prometheus.CounterValue, float64(d[r]), r)
	}
}
