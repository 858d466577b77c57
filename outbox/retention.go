package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/internal/base/loop"
)

// retentionBatch bounds one DELETE, so a large backlog is cleaned in short
// transactions (each message's deliveries go with it).
const retentionBatch = 1000

// Retention deletes delivered messages (their deliveries go with them) and
// Go receivers' receive records once they are older than Keep. Pending,
// relayed and stuck messages are never deleted. The server runs it on the
// leader with FERRY_OUTBOX_RETENTION, a week by default (0 turns it off). Receive records kept
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
	return loop.Every(ctx, every, r.Clean)
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
