package ferry

import (
	"context"
	"log/slog"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/limit"
)

// limitService runs the limiter's per-worker loop (limit.Limiter.Run)
// beside the River client: it marks this worker's limits seen and wakes
// the jobs handed a slot while River was writing their snooze.
type limitService struct {
	limiter *limit.Limiter
	client  *river.Client[pgx.Tx]
	logger  *slog.Logger

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func (s *limitService) Start(ctx context.Context) error {
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	events, unsubscribe := s.client.SubscribeConfig(&river.SubscribeConfig{
		Kinds: []river.EventKind{river.EventKindJobSnoozed}, ChanSize: 10_000,
	})
	s.wg.Go(func() {
		defer unsubscribe()
		if err := s.limiter.Run(ctx, events); err != nil {
			s.logger.Error("limits: stopped", "error", err)
		}
	})
	return nil
}

func (s *limitService) Stop() {
	if s.cancel != nil {
		s.cancel()
		s.wg.Wait()
	}
}
