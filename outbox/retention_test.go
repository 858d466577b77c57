package outbox

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetention_Clean(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	old := b.add(t, "t", `{}`)
	recent := b.add(t, "t", `{}`)
	stuck := b.add(t, "t", `{}`)
	pending := b.add(t, "t", `{}`)
	_, err := b.pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'delivered', delivered_at = now() - interval '10 days' WHERE id = $1`, old)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'delivered', delivered_at = now() - interval '1 hour' WHERE id = $1`, recent)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'stuck', created_at = now() - interval '30 days' WHERE id = $1`, stuck)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO ferry_outbox_delivery (message_id, route, status) VALUES ($1, 'r', 'delivered')`, old)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO ferry_outbox_received (consumer, event_id, received_at) VALUES
		('c', 'old', now() - interval '10 days'), ('c', 'new', now())`)
	require.NoError(t, err)

	r := Retention{Pool: b.pool, Keep: 7 * 24 * time.Hour, Logger: slog.New(slog.DiscardHandler)}
	require.NoError(t, r.Clean(ctx))

	var ids []int64
	rows, err := b.pool.Query(ctx, "SELECT id FROM ferry_outbox ORDER BY id")
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []int64{recent, stuck, pending}, ids, "only delivered messages older than the retention go; stuck and pending stay")
	require.Equal(t, 0, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1", old))
	require.Equal(t, 1, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_received"))
}
