package ferry

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// console implements admin.Console over the server's database.
type console struct{ s *Server }

var _ admin.Console = console{}

func (c console) Leader(ctx context.Context) (admin.LeaderView, error) {
	v := admin.LeaderView{Key: c.s.cfg.ElectionKey}
	var err error
	if v.Holder, err = election.CurrentHolder(ctx, c.s.pool, v.Key); err != nil {
		return v, err
	}
	v.Terms, err = election.Terms(ctx, c.s.pool, v.Key, 20)
	return v, err
}

func (c console) Schedules(ctx context.Context) ([]periodic.Row, error) {
	return periodic.List(ctx, c.s.pool)
}

func (c console) Outbox(ctx context.Context) (admin.OutboxView, error) {
	var (
		v   admin.OutboxView
		err error
	)
	if v.Stats, err = outbox.Stats(ctx, c.s.pool); err != nil {
		return v, err
	}
	v.Stuck, err = outbox.List(ctx, c.s.pool, outbox.ListFilter{Status: "stuck", Limit: 200})
	return v, err
}

func (c console) ResetOutbox(ctx context.Context, ids []int64) (deliveries, messages int, err error) {
	err = pgx.BeginFunc(ctx, c.s.pool, func(tx pgx.Tx) (err error) {
		deliveries, messages, err = outbox.Reset(ctx, tx, c.s.river, ids, c.s.outboxMaxAttempts)
		return err
	})
	return deliveries, messages, err
}

func (c console) Telegram(context.Context) ([]telegram.BotStatus, error) {
	return c.s.TelegramStatus(), nil
}

func (c console) Workers(ctx context.Context, since time.Duration) ([]liveness.WorkerInfo, error) {
	return liveness.List(ctx, c.s.pool, since)
}
