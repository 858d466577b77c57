package admin

import (
	"context"
	"time"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// LeaderView is the leader page: who holds the lock now, and the recent
// terms.
type LeaderView struct {
	Key    int64            `json:"key"`
	Holder *election.Holder `json:"holder"`
	Terms  []election.Term  `json:"terms"`
}

// OutboxView is the outbox page: counts by topic, route and status, and the
// stuck deliveries with their last error.
type OutboxView struct {
	Stats []outbox.Stat     `json:"stats"`
	Stuck []outbox.Delivery `json:"stuck"`
}

// Console is what ferry's pages and their JSON API show and do. The root
// package implements it over the database; tests may implement it too.
type Console interface {
	Leader(ctx context.Context) (LeaderView, error)
	Schedules(ctx context.Context) ([]periodic.Row, error)
	Outbox(ctx context.Context) (OutboxView, error)
	// ResetOutbox puts the stuck deliveries of the messages back (enqueue
	// outbox reset).
	ResetOutbox(ctx context.Context, messageIDs []int64) (deliveries, messages int, err error)
	Telegram(ctx context.Context) ([]telegram.BotStatus, error)
	// Workers lists the live and lost workers, and those dead or stopped
	// within since (enqueue workers).
	Workers(ctx context.Context, since time.Duration) ([]liveness.WorkerInfo, error)
}
