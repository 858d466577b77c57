// Package outboxcap is the worker side of the outbox (package outbox, a
// library module that writing services import): the capability that
// relays committed messages into delivery jobs, delivers them on the
// routes this process declares, sweeps the deliveries of routes no live
// worker declares any more, and keeps delivered messages for their
// retention.
package outboxcap

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/internal/retention"
	"github.com/ferryq/ferry/outbox"
)

// DefaultRetention keeps delivered outbox messages and Go receivers'
// receive records a week: well past the longest retry schedule (a day of
// hourly retries by default), so a redelivery is still recognised.
const DefaultRetention = 7 * 24 * time.Hour

// Section is the outbox capability's configuration (ferry.Config's
// Outbox).
type Section struct {
	// Routes are outbox routes from Go code (handlers or webhooks), beside
	// the config file's (and Telegram's command routers').
	Routes []outbox.Route
	// MaxAttempts bounds each delivery; 0 takes the config file's
	// outbox.max_attempts, else outbox.DefaultMaxAttempts (24).
	MaxAttempts int `env:"FERRY_OUTBOX_MAX_ATTEMPTS" flag:"outbox-max-attempts" file:"outbox.max_attempts" default:"the config file's, else 24" usage:"attempts of each outbox delivery before it is stuck"`
	// RouteGrace is how long a message whose topic no live worker routes
	// waits for a route ("waiting for a route") before it is stuck with
	// "no route for topic", and how long a delivery whose route no live
	// worker declares any more waits before it is stuck; default
	// outbox.DefaultRouteGrace.
	RouteGrace time.Duration `env:"FERRY_OUTBOX_ROUTE_GRACE" flag:"outbox-route-grace" usage:"how long a message whose topic no live worker routes, or a delivery whose route none declares, waits for one before it is stuck"`
	// Retention deletes delivered messages (and Go receivers' receive
	// records) older than it, on the leader; default DefaultRetention,
	// and a negative value keeps everything.
	Retention time.Duration `env:"FERRY_OUTBOX_RETENTION" flag:"outbox-retention" zero:"keep" usage:"delete delivered outbox messages, and Go receivers' receive records, older than this (0 keeps everything)"`
}

// WithDefaults returns sec with every unset field but MaxAttempts (which
// the config file may set) at its default.
func (sec Section) WithDefaults() Section {
	sec.RouteGrace = cmp.Or(sec.RouteGrace, outbox.DefaultRouteGrace)
	sec.Retention = cmp.Or(sec.Retention, DefaultRetention)
	return sec
}

// Check returns what is wrong with a defaulted sec, one error each.
func (sec Section) Check() error {
	var errs []error
	if sec.MaxAttempts < 0 || sec.MaxAttempts > 1000 {
		errs = append(errs, fmt.Errorf("outbox max attempts %d is not between 1 and 1000", sec.MaxAttempts))
	}
	if sec.RouteGrace < 0 {
		errs = append(errs, fmt.Errorf("outbox route grace %s is negative", sec.RouteGrace))
	}
	if err := retention.CheckKeep("outbox", sec.Retention); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Capability is the outbox capability.
type Capability struct {
	sec       Section
	tracer    outbox.Tracer
	limits    []limit.Limit
	routes    *outbox.Routes
	delivered *outbox.Routes
	relay     *outbox.Relay
}

// New returns the capability of sec (its settings checked by the
// server's configuration, Section.Check; its routes here). sec.Routes are every route
// this process knows (Go's, the config file's and Telegram's command
// routers'). queues are the queues this process works, by worker count: it
// delivers its routes, each from a queue of its own, only when it works
// the outbox queue; a queue of its own named like a route's is an error.
// tracer makes the relay's and the deliveries' spans; limits are the
// limits that apply to this process's jobs: a delivery job goes on with
// its ordered key's next messages only when no limit applies to delivery
// jobs (ChainBudget).
func New(sec Section, queues map[string]int, tracer outbox.Tracer, limits []limit.Limit) (*Capability, error) {
	routes, err := outbox.NewRoutes(sec.Routes...)
	if err != nil {
		return nil, err
	}
	c := &Capability{sec: sec, tracer: tracer, limits: limits, routes: routes, delivered: routes}
	if queues[outbox.Queue] == 0 {
		c.delivered, _ = outbox.NewRoutes()
	}
	for _, q := range c.delivered.Queues() {
		if _, taken := queues[q]; taken {
			return nil, fmt.Errorf("queues: %q is the queue of an outbox route; name yours otherwise", q)
		}
	}
	if c.sec.MaxAttempts == 0 {
		c.sec.MaxAttempts = outbox.DefaultMaxAttempts
	}
	return c, nil
}

// Name is "outbox".
func (*Capability) Name() string { return "outbox" }

// Delivered are the routes this process delivers (none when it does not
// work the outbox queue): the server sizes its pool and its River queues
// by them.
func (c *Capability) Delivered() *outbox.Routes { return c.delivered }

// MaxAttempts is what relayed and reset deliveries get.
func (c *Capability) MaxAttempts() int { return c.sec.MaxAttempts }

// Build records the outbox.deliver kind, the routes' declaration before
// River fetches (they count for every relay while this worker's liveness
// lock is held), the relay beside River with its release pass on the
// leader ("outbox-release"), the outbox's counts in /metrics, the sweep
// of routes no live worker declares ("outbox-route-sweep") and the
// retention of delivered messages ("outbox-retention").
func (c *Capability) Build(b *capability.Build) error {
	deliver := outbox.NewDeliverWorker(outbox.DeliverConfig{
		Pool: b.Pool, Routes: c.routes, MaxAttempts: c.sec.MaxAttempts, Logger: b.Logger, Tracer: c.tracer,
		// An ordered chain's turn goes to this process's relay (built
		// below, before any job runs), which starts many chains' next
		// deliveries in one transaction.
		Advance:     func(t outbox.Turn) { c.relay.Advance(t) },
		ChainBudget: ChainBudget(c.limits, c.routes),
	})
	if err := b.Kinds.Add(deliver.Kind()); err != nil {
		return err
	}
	b.Around(capability.Step(func(ctx context.Context) error {
		return outbox.Publish(ctx, b.Pool, b.ClientID, c.delivered)
	}))
	// The relay inserts its delivery jobs through the server's insert-only
	// River client, with the same insert middleware (unique keys, seals,
	// trace context), and sends the insert notification in the round trip
	// that records its deliveries (see outbox.RelayConfig.Inserter).
	c.relay = outbox.NewRelay(outbox.RelayConfig{
		Pool: b.Pool, ListenConfig: b.Sessions.Config().ConnConfig, Schema: b.Schema,
		Inserter: insertOnly{b}, Routes: c.delivered, RouteGrace: c.sec.RouteGrace, MaxAttempts: c.sec.MaxAttempts,
		Tracer: c.tracer, Logger: b.Logger, ReleaseElsewhere: true,
	})
	b.Service(c.relay)
	// The release pass of ordered deliveries reads every waiting one: on
	// the leader only, not on every replica.
	b.Leader("outbox-release", c.relay.RunReleases)
	if err := b.Metrics.Register(metrics.NewOutboxCollector(b.Pool, b.Logger)); err != nil {
		return err
	}
	// The deliveries of a route that no live worker declares any more wait
	// for it, then are stuck, on the same grace as messages.
	b.Leader("outbox-route-sweep", outbox.RouteSweeper{Pool: b.Pool, Client: canceler{b}, Grace: c.sec.RouteGrace, Logger: b.Logger}.Run)
	if c.sec.Retention > 0 {
		b.Leader("outbox-retention", outbox.Retention{Pool: b.Pool, Keep: c.sec.Retention, Logger: b.Logger}.Run)
	}
	return nil
}

// ChainBudget is the outbox's DeliverConfig.ChainBudget: its default, or
// none (-1) when a limit applies to delivery jobs (their kind, the outbox
// queue or a route's queue). A limit counts jobs, and a job that goes on
// with its ordered key's next messages would deliver them past a rate or
// a concurrency meant for the receiver; under such a limit each message
// gets a job of its own.
func ChainBudget(limits []limit.Limit, routes *outbox.Routes) time.Duration {
	for _, l := range limits {
		if l.Kind == (outbox.DeliverArgs{}).Kind() || l.Queue == outbox.Queue {
			return -1
		}
		for _, r := range routes.All() {
			if l.Queue == outbox.QueueFor(r.Name) {
				return -1
			}
		}
	}
	return 0
}

// insertOnly inserts through the server's insert-only River client, which
// exists by the time the relay runs.
type insertOnly struct{ b *capability.Build }

func (i insertOnly) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	return i.b.InsertOnly().InsertManyTx(ctx, tx, params)
}

// canceler cancels through the server's River client.
type canceler struct{ b *capability.Build }

func (c canceler) JobCancelTx(ctx context.Context, tx pgx.Tx, jobID int64) (*rivertype.JobRow, error) {
	return c.b.River().JobCancelTx(ctx, tx, jobID)
}
