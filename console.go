package ferry

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/locks"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// console implements admin.Console over the server's database.
type console struct{ s *Server }

var _ admin.Console = console{}

// summarySQL counts what the summary shows, each on an index: running and
// retryable jobs on River's fetch index (state first), discarded ones on
// its finalized_at index, stuck deliveries on ferry's partial index.
// Messages stuck without a route (stuck, with no delivery) are counted on
// the outbox table itself.
const summarySQL = `SELECT
	(SELECT count(*) FROM river_job WHERE state = 'running'),
	(SELECT count(*) FROM river_job WHERE state = 'retryable'),
	(SELECT count(*) FROM river_job WHERE state = 'discarded' AND finalized_at > now() - make_interval(secs => $1)),
	(SELECT count(*) FROM ferry_outbox_delivery WHERE status = 'stuck'),
	(SELECT count(*) FROM ferry_outbox o WHERE o.status = 'stuck'
		AND NOT EXISTS (SELECT 1 FROM ferry_outbox_delivery d WHERE d.message_id = o.id))`

// lateSQL lists the schedules whose next run is more than $1 seconds past.
const lateSQL = `SELECT id, name, next_run_at FROM ferry_schedule
	WHERE next_run_at < now() - make_interval(secs => $1) ORDER BY next_run_at, id LIMIT 50`

func (c console) Summary(ctx context.Context) (admin.Summary, error) {
	st := c.s.elector.Status()
	host, _ := os.Hostname()
	v := admin.Summary{Replica: admin.Replica{Name: c.s.river.ID(), Hostname: host, PID: os.Getpid(), Role: string(st.State), Term: st.Term}}
	var err error
	if v.Leader, err = election.CurrentHolder(ctx, c.s.pool, c.s.cfg.Leader.Key); err != nil {
		return v, err
	}
	if err := c.s.pool.QueryRow(ctx, summarySQL, admin.DiscardedWindow.Seconds()).Scan(
		&v.Jobs.Running, &v.Jobs.Retryable, &v.Jobs.Discarded, &v.StuckDeliveries, &v.StuckMessages); err != nil {
		return v, fmt.Errorf("ferry: count jobs and stuck deliveries: %w", err)
	}
	rows, err := c.s.pool.Query(ctx, lateSQL, admin.LateAfter.Seconds())
	if err != nil {
		return v, fmt.Errorf("ferry: list late schedules: %w", err)
	}
	if v.LateSchedules, err = pgx.CollectRows(rows, pgx.RowToStructByPos[admin.LateSchedule]); err != nil {
		return v, fmt.Errorf("ferry: list late schedules: %w", err)
	}
	return v, nil
}

func (c console) Leader(ctx context.Context) (admin.LeaderView, error) {
	v := admin.LeaderView{Key: c.s.cfg.Leader.Key}
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
		deliveries, messages, err = outbox.Reset(ctx, tx, c.s.river, ids, c.s.outbox.MaxAttempts())
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

func (c console) Locks(ctx context.Context) ([]locks.Holder, error) {
	return locks.List(ctx, c.s.pool)
}

func (c console) Limits(ctx context.Context) ([]limit.Status, error) {
	return limit.List(ctx, c.s.pool)
}
