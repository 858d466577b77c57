package outbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Receive records, inside tx, that consumer has taken in event eventID, and
// reports whether this is the first time. A receiver does its effect only
// when first is true, in the same tx: a redelivery (the wire is at least
// once) then finds the row and does nothing, and a rolled-back attempt leaves
// no row, so the effect happens exactly once.
//
//	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//		first, err := outbox.Receive(ctx, tx, "billing", eventID)
//		if err != nil || !first {
//			return err
//		}
//		return chargeOnce(ctx, tx, payload)
//	})
func Receive(ctx context.Context, tx pgx.Tx, consumer, eventID string) (first bool, err error) {
	tag, err := tx.Exec(ctx, sqlReceive, consumer, eventID)
	if err != nil {
		return false, fmt.Errorf("outbox: receive %s for %s: %w", eventID, consumer, err)
	}
	return tag.RowsAffected() == 1, nil
}

// sqlReceive is Receive's statement: $1 the consumer, $2 the event id.
const sqlReceive = `INSERT INTO ferry_outbox_received (consumer, event_id) VALUES ($1, $2) ON CONFLICT DO NOTHING`
