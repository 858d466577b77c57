package outbox

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/jobs"
)

// TestRelay_QueueFull: a message whose route's queue is at its bound stays
// pending, visibly, while messages to other queues are relayed, even when
// the waiting messages are the oldest; it is relayed once the queue has
// room.
func TestRelay_QueueFull(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	_, err := jobs.SetQueueBounds(ctx, b.pool, []jobs.QueueBound{{Name: QueueFor("billing"), MaxLength: 2}})
	require.NoError(t, err)
	routes, err := NewRoutes(webhook("order.placed", "billing"), webhook("user.signed", "crm"))
	require.NoError(t, err)
	relay := func(batch int) *Relay {
		return NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: routes, BatchSize: batch, Logger: slog.New(slog.DiscardHandler)})
	}
	status := func(id int64) (string, *string) {
		var (
			s       string
			lastErr *string
		)
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT status, last_error FROM ferry_outbox WHERE id = $1", id).Scan(&s, &lastErr))
		return s, lastErr
	}

	o1, o2, o3 := b.add(t, "order.placed", `{}`), b.add(t, "order.placed", `{}`), b.add(t, "order.placed", `{}`)
	u1 := b.add(t, "user.signed", `{}`)

	// One batch: the billing queue takes two of the three; the third and
	// the crm message are not held back by the refusal.
	n, err := relay(100).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	for _, id := range []int64{o1, o2, u1} {
		s, _ := status(id)
		require.Equal(t, "relayed", s, "message %d", id)
	}
	s, lastErr := status(o3)
	require.Equal(t, "pending", s)
	require.NotNil(t, lastErr)
	require.True(t, strings.HasPrefix(*lastErr, ErrWaitingForRoom.Error()+": "), *lastErr)
	require.Contains(t, *lastErr, "queue full")
	require.Equal(t, 2, count(t, b.pool, "SELECT count(*) FROM river_job WHERE queue = $1", QueueFor("billing")))
	require.Zero(t, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1", o3), "no delivery recorded for a refused message")

	// The waiting message is the oldest pending one, and a batch of one:
	// the claim leaves out the full queue's topic, so the crm message
	// behind it is relayed.
	u2 := b.add(t, "user.signed", `{}`)
	n, err = relay(1).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	s, _ = status(u2)
	require.Equal(t, "relayed", s)
	s, _ = status(o3)
	require.Equal(t, "pending", s)

	// Room again: a billing job leaves the queue (cancelled through River's
	// client, as an operator would), and the message is relayed.
	var left int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM river_job WHERE queue = $1`, QueueFor("billing")).Scan(&left))
	_, err = b.client.JobCancel(ctx, left)
	require.NoError(t, err)
	n, err = relay(1).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	s, lastErr = status(o3)
	require.Equal(t, "relayed", s)
	require.Nil(t, lastErr)
}

// boundingInserter sets a bound on queue (with bound jobs in it already,
// full) just before its first insert: a bound set after the relay read
// which queues have one.
type boundingInserter struct {
	Inserter
	pool  *pgxpool.Pool
	queue string
	once  sync.Once
	err   error
}

func (b *boundingInserter) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	b.once.Do(func() {
		_, b.err = jobs.SetQueueBounds(ctx, b.pool, []jobs.QueueBound{{Name: b.queue, MaxLength: 1}})
	})
	if b.err != nil {
		return nil, b.err
	}
	return b.Inserter.InsertManyTx(ctx, tx, params)
}

// TestRelay_BoundSetMeanwhile: the relay inserts outside a savepoint when
// no route's queue has a bound; a bound set meanwhile that refuses the
// jobs aborts that transaction, and the batch is relayed again at once,
// reading the bound: the message waits, pending, the others are relayed,
// and the relay reports no error. It is relayed once the queue has room.
func TestRelay_BoundSetMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	routes, err := NewRoutes(webhook("order.placed", "billing"), webhook("user.signed", "crm"))
	require.NoError(t, err)
	// One job in the billing queue already: a bound of 1 is full.
	first, err := b.client.Insert(ctx, DeliverArgs{MessageID: 0, Route: "billing"}, &river.InsertOpts{Queue: QueueFor("billing")})
	require.NoError(t, err)
	ins := &boundingInserter{Inserter: b.client, pool: b.pool, queue: QueueFor("billing")}
	relay := NewRelay(RelayConfig{Pool: b.pool, Inserter: ins, Routes: routes, Logger: slog.New(slog.DiscardHandler)})
	status := func(id int64) string {
		var s string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM ferry_outbox WHERE id = $1", id).Scan(&s))
		return s
	}

	o := b.add(t, "order.placed", `{}`)
	u := b.add(t, "user.signed", `{}`)
	n, err := relay.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the second pass leaves out the full queue's topic")
	require.Equal(t, "pending", status(o))
	require.Equal(t, "relayed", status(u))
	require.Equal(t, 1, count(t, b.pool, "SELECT count(*) FROM river_job WHERE queue = $1", QueueFor("billing")), "nothing of the aborted transaction is left")
	require.Zero(t, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1", o))

	_, err = b.client.JobCancel(ctx, first.Job.ID)
	require.NoError(t, err)
	n, err = relay.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, "relayed", status(o))
}
