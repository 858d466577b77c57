package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// retentionBatch bounds one DELETE, so a large backlog is cleaned in short
// transactions.
const retentionBatch = 10000

// Retention deletes delivered messages (their deliveries go with them) and
// Go receivers' receive records once they are older than Keep. Pending,
// relayed and stuck messages are never deleted. It is off unless configured
// (FERRY_OUTBOX_RETENTION) and runs on the leader only. Receive records kept
// for Keep mean a redelivery later than that would not be recognised: keep
// it well above the longest retry (a day of hourly retries by default).
type Retention struct {
	Pool   *pgxpool.Pool
	Keep   time.Duration
	Every  time.Duration // default Keep/10, between 1 minute and 1 hour
	Logger *slog.Logger
}

// Run cleans every Every until ctx ends; it is a leader runnable.
func (r Retention) Run(ctx context.Context) error {
	every := r.Every
	if every == 0 {
		every = min(max(r.Keep/10, time.Minute), time.Hour)
	}
	return runEvery(ctx, every, r.Clean)
}

// runEvery runs once now and every every after, until ctx ends (nil) or
// once fails while ctx lives (its error): the loop of the outbox's leader
// runnables.
func runEvery(ctx context.Context, every time.Duration, once func(context.Context) error) error {
	for {
		if err := once(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		t := time.NewTimer(every)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Clean deletes what is older than Keep, in batches.
func (r Retention) Clean(ctx context.Context) error {
	for _, q := range []struct{ what, sql string }{
		{"messages", `DELETE FROM ferry_outbox WHERE id IN (SELECT id FROM ferry_outbox
			WHERE status = 'delivered' AND delivered_at < now() - $1::interval ORDER BY id LIMIT $2)`},
		{"receive records", `DELETE FROM ferry_outbox_received WHERE ctid IN (SELECT ctid FROM ferry_outbox_received
			WHERE received_at < now() - $1::interval LIMIT $2)`},
	} {
		total := int64(0)
		for {
			tag, err := r.Pool.Exec(ctx, q.sql, r.Keep, retentionBatch)
			if err != nil {
				return fmt.Errorf("outbox: retention: delete %s: %w", q.what, err)
			}
			total += tag.RowsAffected()
			if tag.RowsAffected() < retentionBatch {
				break
			}
		}
		if total > 0 && r.Logger != nil {
			r.Logger.Info("outbox: retention deleted", "what", q.what, "count", total, "older_than", r.Keep)
		}
	}
	return nil
}
