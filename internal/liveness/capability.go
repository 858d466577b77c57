package liveness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/capability"
)

// Section is the liveness capability's configuration (ferry.Config's
// Liveness).
type Section struct {
	// SettleAfter is how long a job the database shows running on this
	// live worker, which it does not run (a fetch or a completion that
	// River lost), is left to River before the worker settles it (see
	// Ledger). Under about 40 s it can race River's completer, still
	// retrying.
	SettleAfter time.Duration `env:"FERRY_SETTLE_AFTER" flag:"settle-after" usage:"time a job shown running on this live worker, which it does not run (a fetch or completion River lost), is left to River before the worker settles it"`
	// RescueInterval is how often the leader looks for dead workers and
	// rescues their running jobs: one read of ferry_worker, pg_locks and
	// pg_stat_activity a pass (RescuerConfig.Interval).
	RescueInterval time.Duration `env:"FERRY_RESCUE_INTERVAL" flag:"rescue-interval" usage:"how often the leader looks for dead workers and rescues their running jobs"`
	// MaxOrphaned is how many times a job's worker may die running it
	// before the rescuer discards the job as poison
	// (RescuerConfig.MaxOrphaned).
	MaxOrphaned int `env:"FERRY_MAX_ORPHANED" flag:"max-orphaned" usage:"times a job's worker may die running it before the job is discarded as poison"`
}

// MinRescueInterval is the shortest RescueInterval: the leader tick's
// least (election.MinTick, which imports this package).
const MinRescueInterval = 10 * time.Millisecond

// Check returns what is wrong with a defaulted sec, one error each.
func (sec Section) Check() error {
	var errs []error
	if sec.MaxOrphaned < 1 {
		errs = append(errs, fmt.Errorf("max orphaned %d is under 1", sec.MaxOrphaned))
	}
	if sec.RescueInterval < MinRescueInterval {
		errs = append(errs, fmt.Errorf("rescue interval %s is under %s", sec.RescueInterval, MinRescueInterval))
	}
	if sec.SettleAfter < time.Second {
		errs = append(errs, fmt.Errorf("settle after %s is under 1s", sec.SettleAfter))
	}
	return errors.Join(errs...)
}

// WithDefaults returns sec with every unset field at its default.
func (sec Section) WithDefaults() Section {
	sec.SettleAfter = cmp.Or(sec.SettleAfter, DefaultSettleAfter)
	sec.RescueInterval = cmp.Or(sec.RescueInterval, DefaultRescueInterval)
	sec.MaxOrphaned = cmp.Or(sec.MaxOrphaned, DefaultMaxOrphaned)
	return sec
}

// Capability is the worker's liveness and the leader's rescue of dead
// workers (capability.Build): the Ledger's middleware, outermost, and its
// hold on every job's context; the Worker, alive from before River
// fetches until after it stopped; the Rescuer, a fenced leader runnable.
type Capability struct {
	sec               Section
	sessionURL        string
	tick, tickTimeout time.Duration
	onDead            func(error)
}

// NewCapability returns the capability. sessionURL is where the liveness
// session lives (the sessions' database, as the elector's); tick and
// tickTimeout are the leader tick's; onDead is the Worker's OnDead.
func NewCapability(sec Section, sessionURL string, tick, tickTimeout time.Duration, onDead func(error)) *Capability {
	return &Capability{sec: sec, sessionURL: sessionURL, tick: tick, tickTimeout: tickTimeout, onDead: onDead}
}

// Name is "liveness".
func (*Capability) Name() string { return "liveness" }

// Build records the Ledger's middleware (LayerLease) and job context, the
// Worker (around River) and the Rescuer ("rescue", fenced).
func (c *Capability) Build(b *capability.Build) error {
	// The ledger records what this worker runs, so that the heartbeat can
	// settle what River lost, and holds every job to the worker's lease:
	// through its middleware and through each job's own context.
	ledger := NewLedger()
	b.Middleware(capability.LayerLease, ledger.Middleware())
	b.JobContext(ledger.JobContext)
	// The ledger follows the jobs River reports written; a River client
	// that works no queue has no events, and runs no job either.
	var subscribe func(*river.SubscribeConfig) (<-chan *river.Event, func())
	if len(b.Queues) > 0 {
		subscribe = func(sc *river.SubscribeConfig) (<-chan *river.Event, func()) { return b.River().SubscribeConfig(sc) }
	}
	w, err := New(Config{
		DatabaseURL: c.sessionURL,
		ClientID:    b.ClientID,
		Tick:        c.tick,
		TickTimeout: c.tickTimeout,
		OnDead:      c.onDead,
		Ledger:      ledger,
		Subscribe:   subscribe,
		Pool:        b.Pool,
		SettleAfter: c.sec.SettleAfter,
		Logger:      b.Logger,
		Registerer:  b.Metrics,
	})
	if err != nil {
		return err
	}
	// The worker is alive, in the database's eyes, from before its River
	// client fetches a job until after it has stopped.
	b.Around(alive{w})
	rescuer, err := NewRescuer(RescuerConfig{
		Pool:        b.Pool,
		Leader:      b.Elector,
		Every:       c.tick,
		Interval:    c.sec.RescueInterval,
		Settle:      b.Elector.Deferral(),
		Stale:       w.MaxHeartbeatAge(),
		Self:        b.ClientID,
		MaxOrphaned: c.sec.MaxOrphaned,
		Logger:      b.Logger,
		Registerer:  b.Metrics,
	})
	if err != nil {
		return err
	}
	// The rescue's writes are fenced (ending a dead worker's sessions and
	// forgetting old workers' rows, which are not, do no harm twice): it
	// runs while a new leader still defers to a crashed predecessor, so a
	// dead leader's jobs are rescued within a pass of the failover, not
	// after the deferral.
	b.FencedLeader("rescue", rescuer.Run)
	return nil
}

// alive starts the Worker on a context that the server's end does not
// cancel: it stops when the server stops it, after River has stopped.
type alive struct{ w *Worker }

func (a alive) Start(ctx context.Context) error { return a.w.Start(context.WithoutCancel(ctx)) }
func (a alive) Stop()                           { a.w.Stop() }
