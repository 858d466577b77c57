package broadcast_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

type testBundle struct {
	pool *pgxpool.Pool
	url  string
}

// setup gives the test a database of its own when own is set (for tests
// that kill or count sessions), else the package's.
func setup(t *testing.T, own bool) testBundle {
	t.Helper()
	url := pgtest.URL(t)
	if own {
		url = pgtest.NewDatabase(t, true)
	}
	return testBundle{pool: pgtest.PoolFor(t, url), url: url}
}

func newBroker(t *testing.T, cfg broadcast.Config) *broadcast.Broker {
	t.Helper()
	b, err := broadcast.New(cfg)
	require.NoError(t, err)
	t.Cleanup(b.Close)
	return b
}

func subscribe(t *testing.T, b *broadcast.Broker, channels ...string) *broadcast.Subscription {
	t.Helper()
	// The subscription lives as long as its context: the test's.
	s, err := b.Subscribe(t.Context(), channels...)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

// next returns the subscription's next event; a watchdog, not a
// measurement, fails a test that would otherwise hang.
func next(t *testing.T, s *broadcast.Subscription) broadcast.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ev, err := s.Next(ctx)
	require.NoError(t, err)
	return ev
}

func requireMessage(t *testing.T, s *broadcast.Subscription, channel, data string) broadcast.Event {
	t.Helper()
	ev := next(t, s)
	require.False(t, ev.Gap, "want message %s on %s, got a gap of %s", data, channel, ev.Channel)
	require.Equal(t, channel, ev.Channel)
	require.JSONEq(t, data, string(ev.Data))
	return ev
}

func requireGap(t *testing.T, s *broadcast.Subscription, channel string) {
	t.Helper()
	ev := next(t, s)
	require.True(t, ev.Gap, "want a gap of %s, got a message on %s: %s", channel, ev.Channel, ev.Data)
	require.Equal(t, channel, ev.Channel)
}

// requireEmpty checks that nothing is queued, once a message published
// after everything else has arrived (so nothing earlier is still on its way).
func requireEmpty(t *testing.T, b *broadcast.Broker, s *broadcast.Subscription, channel string) {
	t.Helper()
	require.NoError(t, b.Publish(context.Background(), channel, "fence"))
	requireMessage(t, s, channel, `"fence"`)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Next(ctx)
	require.ErrorIs(t, err, context.Canceled, "nothing else is queued")
}

func TestBroker_Publish(t *testing.T) {
	t.Parallel()
	tb := setup(t, false)
	ctx := context.Background()
	// Two brokers stand for two processes: each message reaches both.
	pub := newBroker(t, broadcast.Config{Pool: tb.pool})
	other := newBroker(t, broadcast.Config{Pool: tb.pool})
	s1 := subscribe(t, pub, "publish.a", "publish.b")
	s2 := subscribe(t, other, "publish.a")
	s3 := subscribe(t, other, "publish.b")

	before := time.Now().Add(-time.Second)
	require.NoError(t, pub.Publish(ctx, "publish.a", map[string]any{"n": 1}))
	require.NoError(t, pub.Publish(ctx, "publish.b", json.RawMessage(`{"n": 2}`)))

	ev := requireMessage(t, s1, "publish.a", `{"n":1}`)
	require.True(t, ev.PublishedAt.After(before))
	requireMessage(t, s1, "publish.b", `{"n":2}`)
	requireMessage(t, s2, "publish.a", `{"n":1}`)
	requireMessage(t, s3, "publish.b", `{"n":2}`)
	requireEmpty(t, other, s2, "publish.a")
	requireEmpty(t, other, s3, "publish.b")
}

func TestBroker_PublishTx(t *testing.T) {
	t.Parallel()
	tb := setup(t, false)
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{Pool: tb.pool})
	s := subscribe(t, b, "tx")

	tx, err := tb.pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, b.PublishTx(ctx, tx, "tx", "rolled back"))
	require.NoError(t, b.PublishTx(ctx, tx, "tx", strings.Repeat("x", 10_000)), "a large one too")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, pgx.BeginFunc(ctx, tb.pool, func(tx pgx.Tx) error {
		return b.PublishTx(ctx, tx, "tx", "committed")
	}))
	// The committed message is the first to arrive: the rolled-back ones
	// never do.
	requireMessage(t, s, "tx", `"committed"`)
	requireEmpty(t, b, s, "tx")
}

func TestBroker_OneSessionPerProcess(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{Pool: tb.pool})
	subs := make([]*broadcast.Subscription, 10)
	for i := range subs {
		subs[i] = subscribe(t, b, "one", fmt.Sprintf("one.%d", i))
	}
	var sessions int
	require.NoError(t, tb.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name LIKE 'ferry-broadcast:%'`).Scan(&sessions))
	require.Equal(t, 1, sessions)
	require.NoError(t, b.Publish(ctx, "one", 1))
	for _, s := range subs {
		requireMessage(t, s, "one", `1`)
	}
}

func TestBroker_ReconnectGap(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{Pool: tb.pool})
	s1 := subscribe(t, b, "re.a", "re.b")
	s2 := subscribe(t, b, "re.b")
	for round := range 3 {
		require.NoError(t, b.Publish(ctx, "re.a", round))
		requireMessage(t, s1, "re.a", fmt.Sprint(round))

		var killed int
		require.NoError(t, tb.pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND application_name LIKE 'ferry-broadcast:%'`).Scan(&killed))
		require.Equal(t, 1, killed)
		// Whatever is published while the session is down is lost (or not,
		// if the session is already back): either way it comes before the gap
		// or is covered by it.
		_ = b.Publish(ctx, "re.b", "maybe")

		gaps := map[string]bool{}
		for len(gaps) < 2 {
			ev := next(t, s1)
			if ev.Gap {
				gaps[ev.Channel] = true
			} else {
				require.Equal(t, `"maybe"`, string(ev.Data))
			}
		}
		for {
			ev := next(t, s2)
			if ev.Gap {
				require.Equal(t, "re.b", ev.Channel)
				break
			}
			require.Equal(t, `"maybe"`, string(ev.Data))
		}
		requireEmpty(t, b, s1, "re.a")
	}
}

func TestSubscription_Overflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{QueueSize: 3})
	s := subscribe(t, b, "of.a", "of.b")
	fast := subscribe(t, b, "of.a")
	for i := range 10 {
		require.NoError(t, b.Publish(ctx, "of.a", i))
		requireMessage(t, fast, "of.a", fmt.Sprint(i))
	}
	require.NoError(t, b.Publish(ctx, "of.b", "b"))
	for i := range 3 {
		requireMessage(t, s, "of.a", fmt.Sprint(i))
	}
	requireGap(t, s, "of.a")
	requireGap(t, s, "of.b")
	require.EqualValues(t, 8, b.Dropped()[broadcast.DropOverflow])
	require.NoError(t, b.Publish(ctx, "of.a", "after"))
	requireMessage(t, s, "of.a", `"after"`)

	// A gap marks where the hole is: messages queued after it come after it.
	for i := range 4 {
		require.NoError(t, b.Publish(ctx, "of.a", i))
	}
	next(t, s)
	require.NoError(t, b.Publish(ctx, "of.a", "later"))
	for i := 1; i < 3; i++ {
		requireMessage(t, s, "of.a", fmt.Sprint(i))
	}
	requireGap(t, s, "of.a")
	requireMessage(t, s, "of.a", `"later"`)
}

func TestBroker_LargeMessage(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{Pool: tb.pool, Retention: time.Hour})
	other := newBroker(t, broadcast.Config{Pool: tb.pool})
	s := subscribe(t, other, "large")

	big := map[string]string{"text": strings.Repeat("é", 30_000)}
	want, err := json.Marshal(big)
	require.NoError(t, err)
	require.Greater(t, len(want), 8000)
	require.NoError(t, b.Publish(ctx, "large", big))
	requireMessage(t, s, "large", string(want))
	var rows int
	require.NoError(t, tb.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_broadcast_message`).Scan(&rows))
	require.Equal(t, 1, rows, "it went through the table")

	// Rows older than the retention are pruned; younger ones are kept.
	n, err := b.Prune(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	short := newBroker(t, broadcast.Config{Pool: tb.pool, Retention: time.Microsecond})
	n, err = short.Prune(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, n)

	// A reference to a row that is gone is a gap, counted as expired.
	_, err = tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', '{"c":"large","t":1,"r":424242}')`)
	require.NoError(t, err)
	requireGap(t, s, "large")
	require.EqualValues(t, 1, other.Dropped()[broadcast.DropExpired])

	// A message of exactly 64 KiB is accepted; one byte more is not.
	max := `"` + strings.Repeat("a", broadcast.MaxDataBytes-2) + `"`
	require.NoError(t, b.Publish(ctx, "large", json.RawMessage(max)))
	requireMessage(t, s, "large", max)
}

func TestBroker_BadInput(t *testing.T) {
	t.Parallel()
	tb := setup(t, true)
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{Pool: tb.pool})
	s := subscribe(t, b, "bad")
	for _, c := range []string{"", "a b", "é", "a/b", strings.Repeat("a", 129)} {
		require.ErrorIs(t, b.Publish(ctx, c, 1), broadcast.ErrInvalidChannel, "%q", c)
		_, err := b.Subscribe(ctx, c)
		require.ErrorIs(t, err, broadcast.ErrInvalidChannel, "%q", c)
	}
	for _, c := range []string{"a", "room:42", "order.placed", "A-b_c.d:e", strings.Repeat("a", 128)} {
		require.NoError(t, broadcast.CheckChannel(c))
	}
	err := b.Publish(ctx, "bad", json.RawMessage(`"`+strings.Repeat("a", broadcast.MaxDataBytes-1)+`"`))
	require.ErrorIs(t, err, broadcast.ErrTooLarge)
	require.ErrorContains(t, b.Publish(ctx, "bad", func() {}), "encode")
	var rows int
	require.NoError(t, tb.pool.QueryRow(ctx, `SELECT count(*) FROM ferry_broadcast_message`).Scan(&rows))
	require.Zero(t, rows)
	requireEmpty(t, b, s, "bad")
	// A NOTIFY on ferry's channel that is not a message is dropped.
	_, err = tb.pool.Exec(ctx, `SELECT pg_notify('ferry_broadcast', 'not json')`)
	require.NoError(t, err)
	requireEmpty(t, b, s, "bad")
	require.EqualValues(t, 1, b.Dropped()[broadcast.DropMalformed])
}

func TestBroker_InProcess(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{})
	s := subscribe(t, b, "local")
	require.NoError(t, b.Publish(ctx, "local", "hi"))
	requireMessage(t, s, "local", `"hi"`)
	require.ErrorIs(t, b.PublishTx(ctx, nil, "local", "hi"), broadcast.ErrNoDatabase)
	require.ErrorIs(t, b.Publish(ctx, "lo cal", 1), broadcast.ErrInvalidChannel)
}

func TestSubscription_Close(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newBroker(t, broadcast.Config{})
	sctx, cancel := context.WithCancel(ctx)
	s, err := b.Subscribe(sctx, "close")
	require.NoError(t, err)
	cancel()
	_, err = s.Next(ctx)
	require.ErrorIs(t, err, broadcast.ErrClosed, "the subscription ends with its context")

	s2 := subscribe(t, b, "close")
	b.Close()
	_, err = s2.Next(ctx)
	require.ErrorIs(t, err, broadcast.ErrClosed)
	require.ErrorIs(t, b.Publish(ctx, "close", 1), broadcast.ErrClosed)
	_, err = b.Subscribe(ctx, "close")
	require.ErrorIs(t, err, broadcast.ErrClosed)
	b.Close()
}
