package outbox

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

type relayBundle struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

func relaySetup(t *testing.T) *relayBundle {
	t.Helper()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return &relayBundle{pool: pool, client: client}
}

func (b *relayBundle) relay(t *testing.T, routes ...Route) *Relay {
	t.Helper()
	rs, err := NewRoutes(routes...)
	require.NoError(t, err)
	return NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: rs, Logger: slog.New(slog.DiscardHandler)})
}

func webhook(topic, name string) Route {
	return Route{Topic: topic, Name: name, URL: "http://127.0.0.1:1/hook"}
}

func (b *relayBundle) add(t *testing.T, topic string, payload any, opts ...AddOption) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		id, err = Add(context.Background(), tx, topic, payload, opts...)
		return err
	}))
	return id
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func TestAdd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)

	id := b.add(t, "order.placed", map[string]any{"order_id": 42}, WithDedupKey("order-42"))
	require.Positive(t, id)
	var (
		topic, status string
		payload       json.RawMessage
		key           *string
	)
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT topic, payload, dedup_key, status FROM ferry_outbox WHERE id = $1", id).Scan(&topic, &payload, &key, &status))
	require.Equal(t, "order.placed", topic)
	require.JSONEq(t, `{"order_id":42}`, string(payload))
	require.Equal(t, "order-42", *key)
	require.Equal(t, "pending", status)

	// A rolled-back transaction leaves no message.
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := Add(ctx, tx, "order.placed", json.RawMessage(`{"order_id":43}`)); err != nil {
			return err
		}
		return errors.New("the caller's transaction fails")
	})
	require.Error(t, err)
	require.Equal(t, 1, count(t, b.pool, "SELECT count(*) FROM ferry_outbox"))

	for name, tc := range map[string]struct {
		topic   string
		payload any
		opts    []AddOption
		want    error
	}{
		"topic with a space":  {"order placed", `{}`, nil, ErrInvalidTopic},
		"topic too long":      {strings.Repeat("a", 129), `{}`, nil, ErrInvalidTopic},
		"empty topic":         {"", `{}`, nil, ErrInvalidTopic},
		"invalid json":        {"t", json.RawMessage(`{"a":`), nil, ErrInvalidPayload},
		"payload over 256KiB": {"t", map[string]string{"x": strings.Repeat("a", MaxPayloadBytes)}, nil, ErrPayloadTooLarge},
		"unencodable payload": {"t", make(chan int), nil, ErrInvalidPayload},
		"empty dedup key":     {"t", `{}`, []AddOption{WithDedupKey("")}, ErrInvalidDedupKey},
		"dedup key too long":  {"t", `{}`, []AddOption{WithDedupKey(strings.Repeat("k", 257))}, ErrInvalidDedupKey},
	} {
		t.Run(name, func(t *testing.T) {
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := Add(ctx, tx, tc.topic, tc.payload, tc.opts...)
				return err
			})
			require.ErrorIs(t, err, tc.want)
		})
	}

	// A duplicate dedup key is refused and leaves the caller's tx usable.
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, err := Add(ctx, tx, "order.placed", `{}`, WithDedupKey("order-42"))
		require.ErrorIs(t, err, ErrDuplicate)
		_, err = Add(ctx, tx, "order.placed", `{}`, WithDedupKey("order-44"))
		return err
	})
	require.NoError(t, err)
	// The same key in another topic is another message.
	b.add(t, "order.cancelled", `{}`, WithDedupKey("order-42"))
	require.Equal(t, 3, count(t, b.pool, "SELECT count(*) FROM ferry_outbox"))
}

func TestPlainSQLWriter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	insert := func(sql string, args ...any) error {
		_, err := b.pool.Exec(ctx, sql, args...)
		return err
	}
	// A traced service writes the W3C trace context of its span beside the
	// message; the relay passes it to the delivery jobs.
	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	require.NoError(t, insert(`INSERT INTO ferry_outbox (topic, payload, dedup_key, traceparent, tracestate) VALUES ('order.placed', '{"order_id": 1}', 'k1', $1, 'congo=t61rcWkgMzE')`, parent))

	for name, tc := range map[string]struct {
		sql        string
		args       []any
		constraint string
		code       string
	}{
		"bad topic":         {`INSERT INTO ferry_outbox (topic, payload) VALUES ('order placed', '{}')`, nil, "ferry_outbox_topic_format", "23514"},
		"long topic":        {`INSERT INTO ferry_outbox (topic, payload) VALUES (repeat('a', 129), '{}')`, nil, "ferry_outbox_topic_format", "23514"},
		"big payload":       {`INSERT INTO ferry_outbox (topic, payload) VALUES ('t', jsonb_build_object('x', repeat('a', 262144)))`, nil, "ferry_outbox_payload_size", "23514"},
		"empty dedup key":   {`INSERT INTO ferry_outbox (topic, payload, dedup_key) VALUES ('t', '{}', '')`, nil, "ferry_outbox_dedup_key_length", "23514"},
		"duplicate key":     {`INSERT INTO ferry_outbox (topic, payload, dedup_key) VALUES ('order.placed', '{}', 'k1')`, nil, "ferry_outbox_topic_dedup_key", "23505"},
		"bad status":        {`INSERT INTO ferry_outbox (topic, payload, status) VALUES ('t', '{}', 'sent')`, nil, "ferry_outbox_status", "23514"},
		"null payload":      {`INSERT INTO ferry_outbox (topic, payload) VALUES ('t', NULL)`, nil, "", "23502"},
		"payload not json":  {`INSERT INTO ferry_outbox (topic, payload) VALUES ('t', 'not json')`, nil, "", "22P02"},
		"bad traceparent":   {`INSERT INTO ferry_outbox (topic, payload, traceparent) VALUES ('t', '{}', $1)`, []any{"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"}, "ferry_outbox_traceparent_format", "23514"},
		"traceparent upper": {`INSERT INTO ferry_outbox (topic, payload, traceparent) VALUES ('t', '{}', $1)`, []any{"00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01"}, "ferry_outbox_traceparent_format", "23514"},
		"zero trace id":     {`INSERT INTO ferry_outbox (topic, payload, traceparent) VALUES ('t', '{}', $1)`, []any{"00-00000000000000000000000000000000-00f067aa0ba902b7-01"}, "ferry_outbox_traceparent_format", "23514"},
		"zero parent id":    {`INSERT INTO ferry_outbox (topic, payload, traceparent) VALUES ('t', '{}', $1)`, []any{"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01"}, "ferry_outbox_traceparent_format", "23514"},
		"state alone":       {`INSERT INTO ferry_outbox (topic, payload, tracestate) VALUES ('t', '{}', 'congo=t61rcWkgMzE')`, nil, "ferry_outbox_tracestate_length", "23514"},
	} {
		t.Run(name, func(t *testing.T) {
			err := insert(tc.sql, tc.args...)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, err, &pgErr)
			require.Equal(t, tc.code, pgErr.Code)
			require.Equal(t, tc.constraint, pgErr.ConstraintName)
		})
	}
	require.Equal(t, 1, count(t, b.pool, "SELECT count(*) FROM ferry_outbox"), "no bad row was written")

	// The valid row is relayed like any other.
	r := b.relay(t, webhook("order.placed", "billing"))
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery WHERE route = 'billing' AND job_id IS NOT NULL"))
	var metadata string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT j.metadata::text FROM river_job j JOIN ferry_outbox_delivery d ON d.job_id = j.id WHERE d.route = 'billing'`).Scan(&metadata))
	require.JSONEq(t, `{"traceparent": "`+parent+`", "tracestate": "congo=t61rcWkgMzE"}`, metadata, "no tracer: the writer's own context, passed on")
}

func TestRelay_RelayOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	r := b.relay(t, webhook("order.placed", "billing"), webhook("order.placed", "crm"))
	placed := b.add(t, "order.placed", `{"order_id":1}`)
	orphan := b.add(t, "nobody.listens", `{}`)

	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)

	var status string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status FROM ferry_outbox WHERE id = $1", placed).Scan(&status))
	require.Equal(t, "relayed", status)
	require.Equal(t, 2, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1 AND status = 'pending'", placed))
	require.Equal(t, 2, count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver'
		AND queue = CASE args->>'route' WHEN 'billing' THEN $2 WHEN 'crm' THEN $3 END
		AND (args->>'message_id')::bigint = $1 AND max_attempts = 24`, placed, QueueFor("billing"), QueueFor("crm")),
		"each in its route's queue")
	require.Equal(t, 0, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery d LEFT JOIN river_job j ON j.id = d.job_id WHERE j.id IS NULL"))

	var lastErr string
	require.NoError(t, b.pool.QueryRow(ctx, "SELECT status, last_error FROM ferry_outbox WHERE id = $1", orphan).Scan(&status, &lastErr))
	require.Equal(t, "pending", status, "a topic with no route waits for one (TestRelay_WaitingForRoute)")
	require.Equal(t, ErrWaitingForRoute.Error(), lastErr, "visibly")

	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "nothing is relayed twice")

	// A relay that has a route for the orphan relays it.
	r2 := b.relay(t, webhook("nobody.listens", "late"))
	n, err = r2.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

func TestRelay_ParallelRelaysRelayEachMessageOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	const n = 10000
	_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) SELECT 'bulk', jsonb_build_object('i', i) FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)

	routes := []Route{webhook("bulk", "a"), webhook("bulk", "b")}
	r1, r2 := b.relay(t, routes...), b.relay(t, routes...)
	var wg sync.WaitGroup
	for _, r := range []*Relay{r1, r2} {
		wg.Go(func() { require.NoError(t, r.Drain(ctx)) })
	}
	wg.Wait()

	require.Equal(t, n, count(t, b.pool, "SELECT count(*) FROM ferry_outbox WHERE status = 'relayed'"), "none lost")
	require.Equal(t, 2*n, count(t, b.pool, "SELECT count(*) FROM ferry_outbox_delivery"), "one delivery per (message, route)")
	require.Equal(t, 2*n, count(t, b.pool, "SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver'"), "one job per delivery")
	require.Equal(t, 2*n, count(t, b.pool, "SELECT count(DISTINCT (args->>'message_id', args->>'route')) FROM river_job"))
}

func TestRelay_Start(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	r := b.relay(t, webhook("t", "hook"))
	r.cfg.PollInterval = time.Hour // only the notification can wake it
	require.NoError(t, r.Start(ctx))
	require.NoError(t, r.Start(ctx), "a second Start is a no-op")
	<-r.Started()
	stopped := r.Stopped()
	t.Cleanup(func() {
		r.Stop()
		r.Stop()
		<-stopped
	})

	// Whenever the write lands (before the first drain, before LISTEN, or
	// after), the relay finds it: it drains at start and after LISTEN, and
	// the trigger's notification wakes it.
	id := b.add(t, "t", `{}`)
	require.Eventually(t, func() bool {
		return count(t, b.pool, "SELECT count(*) FROM ferry_outbox WHERE id = $1 AND status = 'relayed'", id) == 1
	}, 5*time.Second, 10*time.Millisecond)
}

// TestRelay_WakesWorkers: a relay transaction notifies its delivery jobs'
// queues itself, though the River client that inserted them sent no
// notification (at most one per fetch cooldown per queue; here an hour),
// so the workers start them without waiting for their poll (here an hour).
func TestRelay_WakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	b := &relayBundle{pool: pool, client: hourCooldownInserter(t, pool)}
	r := b.relay(t, webhook("t", "hook"))

	// The first message's job, inserted before the worker starts, is
	// taken by its first fetch, made once it listens. Its insert spent
	// the inserting client's one notification of the hour.
	first := b.add(t, "t", `{}`)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	started := startHourPollWorker(t, pool, QueueFor("hook"))
	started(first)

	for range 3 {
		id := b.add(t, "t", `{}`)
		n, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		started(id)
	}
}

// hourCooldownInserter is a River client that sends at most one insert
// notification per queue per hour (River's client sends one per fetch
// cooldown): a job it inserts after its first in a queue starts at once
// only when something else wakes the queue's workers.
func hourCooldownInserter(t *testing.T, pool *pgxpool.Pool) *river.Client[pgx.Tx] {
	t.Helper()
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: time.Hour, FetchPollInterval: time.Hour})
	require.NoError(t, err)
	return inserter
}

// startHourPollWorker starts a River client working queue with a job
// that only reports its message's id, polling once an hour: only its
// first fetch and insert notifications make it fetch. started(id) fails
// the test unless the next job it works is message id's, within 30 s.
func startHourPollWorker(t *testing.T, pool *pgxpool.Pool, queue string) (started func(id int64)) {
	t.Helper()
	ctx := context.Background()
	worked := make(chan int64, 10)
	workers := river.NewWorkers()
	river.AddWorker(workers, river.WorkFunc(func(_ context.Context, job *river.Job[DeliverArgs]) error {
		worked <- job.Args.MessageID
		return nil
	}))
	worker, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchPollInterval: time.Hour, // only a notification wakes it
		Queues:            map[string]river.QueueConfig{queue: {MaxWorkers: 10}},
		Workers:           workers,
		Logger:            slog.New(slog.DiscardHandler),
	})
	require.NoError(t, err)
	require.NoError(t, worker.Start(ctx))
	t.Cleanup(func() { require.NoError(t, worker.Stop(context.WithoutCancel(ctx))) })
	return func(id int64) {
		t.Helper()
		select {
		case got := <-worked:
			require.Equal(t, id, got)
		case <-time.After(30 * time.Second):
			t.Fatalf("message %d's delivery job was not started: nothing woke the worker", id)
		}
	}
}

// TestWakeWorkers: the relay's notification is River's own: its channel
// in the schema given (or the current one), its payload byte for byte.
func TestWakeWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.Pool(t)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var current string
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_schema()").Scan(&current))
	for _, schema := range []string{"", "ferry_b"} {
		channel := cmp.Or(schema, current) + ".river_insert"
		_, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize())
		require.NoError(t, err)
		_, err = conn.Exec(ctx, sqlWakeWorkers, schema, []string{"outbox-hook", "default"})
		require.NoError(t, err)
		for _, queue := range []string{"outbox-hook", "default"} {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			note, err := conn.Conn().WaitForNotification(wctx)
			cancel()
			require.NoError(t, err)
			require.Equal(t, channel, note.Channel)
			require.Equal(t, fmt.Sprintf("{\"queue\": %q}", queue), note.Payload, "as River's client sends it")
		}
		_, err = conn.Exec(ctx, "UNLISTEN *")
		require.NoError(t, err)
	}
}

func TestList_StatusFilter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	r := b.relay(t, webhook("t", "hook"))
	relayed := b.add(t, "t", `{}`)
	_, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	pending := b.add(t, "t", `{}`)

	ids := func(status string) []int64 {
		list, err := List(ctx, b.pool, ListFilter{Status: status})
		require.NoError(t, err)
		var out []int64
		for _, d := range list {
			out = append(out, d.MessageID)
		}
		return out
	}
	require.Equal(t, []int64{relayed}, ids("relayed"), "a relayed message is found by its own status")
	require.Equal(t, []int64{pending, relayed}, ids("pending"), "pending: the unrelayed message, and the relayed one whose delivery is pending")
	require.Empty(t, ids("stuck"))
	require.Len(t, ids(""), 2)
}

// syncCommitSpy is an Inserter that records the relay transaction's
// synchronous_commit when it inserts the delivery jobs.
type syncCommitSpy struct {
	Inserter
	seen []string
}

func (s *syncCommitSpy) InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error) {
	var v string
	if err := tx.QueryRow(ctx, "SHOW synchronous_commit").Scan(&v); err != nil {
		return nil, err
	}
	s.seen = append(s.seen, v)
	return s.Inserter.InsertManyTx(ctx, tx, params)
}

func TestRelay_CommitsAsynchronously(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	spy := &syncCommitSpy{Inserter: b.client}
	rs, err := NewRoutes(webhook("order.placed", "billing"))
	require.NoError(t, err)
	// One connection, so that the check after the relay reads the one
	// the relay used.
	cfg := b.pool.Config().Copy()
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(one.Close)
	r := NewRelay(RelayConfig{Pool: one, Inserter: spy, Routes: rs, Logger: slog.New(slog.DiscardHandler)})
	b.add(t, "order.placed", `{"order_id":1}`)

	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"off"}, spy.seen, "the relay's transaction commits without waiting for its flush")

	var outside string
	require.NoError(t, one.QueryRow(ctx, "SHOW synchronous_commit").Scan(&outside))
	require.Equal(t, "on", outside, "SET LOCAL: the pooled connection keeps its setting")
}

// TestRelay_RoundTrips: a relay's transaction sends the read of the state
// it routes by with the claims, which filter by the state the transaction
// before read: five round trips (BEGIN; the state and the claims; River's
// insert; the record; COMMIT; six when the state went first), the first
// transaction of a relay reading the state first. When the state read
// would let the claims take what they left out (a queue with room
// again), one RelayOnce passes again at once.
func TestRelay_RoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	_, err := jobs.SetQueueBounds(ctx, b.pool, []jobs.QueueBound{{Name: QueueFor("crm"), MaxLength: 1}})
	require.NoError(t, err)
	cfg := b.pool.Config().Copy()
	trace := &statementTracer{}
	cfg.ConnConfig.Tracer = trace
	traced, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(traced.Close)
	// An inserter that sends River's insert notification once per queue
	// (the relay sends its own), as ferry's worker gives its relay; a
	// relay of its own has made its first insert (River's client reads
	// the server's version then) and notification.
	inserter := hourCooldownInserter(t, b.pool)
	relay := func() *Relay {
		return NewRelay(RelayConfig{Pool: traced, Inserter: inserter,
			Routes: mustRoutes(t, webhook("order.placed", "billing"), webhook("user.signed", "crm")), BatchSize: 1, Logger: slog.New(slog.DiscardHandler)})
	}
	b.add(t, "order.placed", `{}`)
	_, err = relay().RelayOnce(ctx)
	require.NoError(t, err)
	r := relay()
	relayOnce := func() (claimed int, statements int64) {
		t.Helper()
		trace.n.Store(0)
		n, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		return n, trace.n.Load()
	}

	b.add(t, "order.placed", `{}`)
	n, first := relayOnce()
	require.Equal(t, 1, n)
	require.EqualValues(t, 6, first, "a relay's first transaction: BEGIN, the state, the claims, River's insert, the record, COMMIT")
	b.add(t, "order.placed", `{}`)
	n, next := relayOnce()
	require.Equal(t, 1, n)
	require.EqualValues(t, 5, next, "BEGIN, the state with the claims, River's insert, the record, COMMIT")

	// The crm queue takes one job; then the claims leave its topic out,
	// once a transaction has read that it is at its bound.
	b.add(t, "user.signed", `{}`)
	n, _ = relayOnce()
	require.Equal(t, 1, n)
	n, _ = relayOnce()
	require.Zero(t, n)
	held := b.add(t, "user.signed", `{}`)
	n, _ = relayOnce()
	require.Zero(t, n, "the full queue's topic is left out")
	require.Equal(t, "pending", messageOf(t, b, held).Status)

	// Room again: the claims, by the state read before, leave the message
	// out; the state read with them has room, so the same RelayOnce passes
	// again and relays it.
	var left int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM river_job WHERE queue = $1`, QueueFor("crm")).Scan(&left))
	_, err = b.client.JobCancel(ctx, left)
	require.NoError(t, err)
	n, _ = relayOnce()
	require.Equal(t, 1, n)
	require.Equal(t, "relayed", messageOf(t, b, held).Status)
}
