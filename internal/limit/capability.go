package limit

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/capability"
)

// Capability is the config file's limits on a worker (capability.Build):
// the Limiter's middleware, its loop on every worker, its sweep on the
// leader, and their metrics. Without limits it contributes nothing but
// the Limiter, which then does nothing.
type Capability struct {
	limits  []Limit
	lead    time.Duration
	limiter *Limiter
}

// NewCapability checks limits (the config file's `limits:`) and returns
// the capability. lead is the workers' fetch poll interval (Config.Lead).
func NewCapability(limits []Limit, lead time.Duration) (*Capability, error) {
	if _, err := New(Config{Limits: limits, Lead: lead}); err != nil {
		return nil, err
	}
	return &Capability{limits: limits, lead: lead}, nil
}

// Name is "limits".
func (*Capability) Name() string { return "limits" }

// Limiter is the capability's Limiter, once built: the server waits on it
// (Limiter.Wait) after River has stopped.
func (c *Capability) Limiter() *Limiter { return c.limiter }

// Build records the limits' middleware (after the seal verifier, in the
// admit layer: a job over its limit is held before the metrics and traces
// see it), their registration before River fetches (the sweep wakes the
// jobs of limits no worker has registered), the loop that follows River's
// snoozes on a worker that works queues, the sweep on the leader
// ("limits"), and ferry_limit_in_use and ferry_limit_waiting.
func (c *Capability) Build(b *capability.Build) error {
	l, err := New(Config{Pool: b.Pool, Limits: c.limits, Schema: b.Schema, Lead: c.lead, Logger: b.Logger})
	if err != nil {
		return err
	}
	c.limiter = l
	b.Around(capability.Step(l.Register))
	if len(c.limits) == 0 {
		return nil
	}
	b.Middleware(capability.LayerAdmit, l.Middleware())
	if len(b.Queues) > 0 { // a River client that works no queue has no events
		b.Service(&follower{limiter: l, build: b, logger: b.Logger})
	}
	b.Leader("limits", l.Sweeper())
	return b.Metrics.Register(NewLimitCollector(b.Pool, b.Logger))
}

// follower runs the limiter's per-worker loop (Limiter.Run) beside the
// River client: it marks this worker's limits seen and wakes the jobs
// handed a slot while River was writing their snooze.
type follower struct {
	limiter *Limiter
	build   *capability.Build
	logger  *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (f *follower) Start(ctx context.Context) error {
	ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	events, unsubscribe := f.build.River().SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobSnoozed}, ChanSize: 10_000,
	})
	f.wg.Go(func() {
		defer unsubscribe()
		if err := f.limiter.Run(ctx, events); err != nil {
			f.logger.Error("limits: stopped", "error", err)
		}
	})
	return nil
}

func (f *follower) Stop() {
	if f.cancel != nil {
		f.cancel()
		f.wg.Wait()
	}
}
