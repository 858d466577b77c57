package limit

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/ferryq/ferry/internal/capability"
)

// Capability is the config file's limits on a worker (capability.Build):
// the Limiter's middleware, its loop on every worker, its sweep on the
// leader, and their metrics. Without limits it contributes nothing but
// the Limiter, which then does nothing.
type Capability struct {
	limits []Limit
	lead   time.Duration
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

// Build records the limits' claim on the server's River pilot (before
// River's fetch: the jobs parked behind limits), their middleware (after
// the seal verifier, in the admit layer: a job claimed ahead of its rate
// turn waits for it before the metrics and traces see it), their
// registration before River fetches, the loop that marks them seen on a
// worker that works queues, the sweep on the leader ("limits"), and
// ferry_limit_in_use and ferry_limit_waiting.
func (c *Capability) Build(b *capability.Build) error {
	l, err := New(Config{Pool: b.Pool, Limits: c.limits, Schema: b.Schema, Lead: c.lead, Logger: b.Logger})
	if err != nil {
		return err
	}
	b.Around(capability.Step(l.Start))
	if len(c.limits) == 0 {
		return nil
	}
	b.Middleware(capability.LayerAdmit, l.Middleware())
	if len(b.Queues) > 0 { // a River client that works no queue claims nothing
		if b.Pilot == nil {
			return errors.New("limits: the server has no River pilot to claim parked jobs with")
		}
		if err := b.Pilot.SetClaim(l.Claim); err != nil {
			return err
		}
		b.Service(&follower{limiter: l, logger: b.Logger})
	}
	b.Leader("limits", l.Sweeper())
	return b.Metrics.Register(NewLimitCollector(b.Pool, b.Logger))
}

// follower runs the limiter's per-worker loop (Limiter.Run) beside the
// River client: it marks this worker's limits seen.
type follower struct {
	limiter *Limiter
	logger  *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (f *follower) Start(ctx context.Context) error {
	ctx, f.cancel = context.WithCancel(context.WithoutCancel(ctx))
	f.wg.Go(func() {
		if err := f.limiter.Run(ctx); err != nil {
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
