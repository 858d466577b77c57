package outbox

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

func TestQueueFor(t *testing.T) {
	t.Parallel()
	names := []string{
		"billing", "Billing", "BILLING", "a", "_", "...", "a.b", "a-b", "a_b", "a:b", "a--b",
		"telegram-desk-commands", strings.Repeat("x", 128), strings.Repeat("x", 127) + "y",
		strings.Repeat("X.", 64), strings.Repeat("9", 128),
	}
	seen := map[string]string{}
	for _, name := range names {
		q := QueueFor(name)
		require.NoError(t, jobs.ValidateQueueName(q), "route %q", name)
		require.True(t, strings.HasPrefix(q, RouteQueuePrefix), q)
		require.NotEqual(t, Queue, q)
		require.Equal(t, q, QueueFor(name), "deterministic")
		prev, dup := seen[q]
		require.False(t, dup, "routes %q and %q share queue %q", prev, name, q)
		seen[q] = name
	}
	// A route's queue is where its jobs wait across deploys and versions:
	// it must never change for a name.
	require.Equal(t, "outbox_billing_0c95c7ece1ce1a975027", QueueFor("billing"))

	rs, err := NewRoutes(webhook("t", "billing"), webhook("u", "audit"))
	require.NoError(t, err)
	require.Equal(t, []string{"outbox_audit_b81f37a043a6f767e7c9", "outbox_billing_0c95c7ece1ce1a975027"}, rs.Queues())
}

func mustRoutes(t *testing.T, routes ...Route) *Routes {
	t.Helper()
	rs, err := NewRoutes(routes...)
	require.NoError(t, err)
	return rs
}

// jobQueues returns, by route, the queue of each delivery job of message id.
func jobQueues(t *testing.T, b *relayBundle, id int64) map[string]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT args->>'route', queue FROM river_job
		WHERE kind = 'outbox.deliver' AND (args->>'message_id')::bigint = $1`, id)
	require.NoError(t, err)
	out := map[string]string{}
	var route, queue string
	_, err = pgx.ForEachRow(rows, []any{&route, &queue}, func() error { out[route] = queue; return nil })
	require.NoError(t, err)
	return out
}

type messageState struct {
	Status    string
	LastError *string
	Waiting   bool
}

func messageOf(t *testing.T, b *relayBundle, id int64) messageState {
	t.Helper()
	var m messageState
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, last_error, route_wait_since IS NOT NULL
		FROM ferry_outbox WHERE id = $1`, id).Scan(&m.Status, &m.LastError, &m.Waiting))
	return m
}

// TestRelay_WaitingForRoute: a message whose topic nobody routes waits,
// visibly, for the grace period; it is relayed when a route appears, and
// stuck once the grace is over; a reset gives it a new wait.
func TestRelay_WaitingForRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	quiet := slog.New(slog.DiscardHandler)
	relay := func(grace time.Duration, routes ...Route) *Relay {
		return NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, routes...), RouteGrace: grace, BatchSize: 100, Logger: quiet})
	}
	none := relay(time.Hour)

	id := b.add(t, "op.new", `{}`)
	n, err := none.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	m := messageOf(t, b, id)
	require.Equal(t, "pending", m.Status)
	require.True(t, m.Waiting)
	require.NotNil(t, m.LastError)
	require.Equal(t, "waiting for a route", *m.LastError)

	stats, err := Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Equal(t, []Stat{{Topic: "op.new", Route: "", Status: "waiting for a route", Count: 1, Of: StatMessages}}, stats)
	list, err := List(ctx, b.pool, ListFilter{Status: "waiting"})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, id, list[0].MessageID)
	require.Equal(t, "pending", list[0].MessageStatus)
	require.Equal(t, "waiting for a route", *list[0].LastError)
	list, err = List(ctx, b.pool, ListFilter{Status: "stuck"})
	require.NoError(t, err)
	require.Empty(t, list)

	n, err = none.RelayOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a waiting message within its grace and still without a route is left alone")

	// More waiting messages than a batch: Drain ends, every one waits.
	_, err = b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) SELECT 'op.new', '{}' FROM generate_series(1, 250)`)
	require.NoError(t, err)
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second) // watchdog only
	defer cancel()
	require.NoError(t, none.Drain(dctx))
	require.Equal(t, 251, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending' AND route_wait_since IS NOT NULL`))

	// A route appears: every waiting message is relayed to it.
	require.NoError(t, relay(time.Hour, webhook("op.new", "late")).Drain(dctx))
	require.Equal(t, 251, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'relayed' AND last_error IS NULL`))
	require.Equal(t, map[string]string{"late": QueueFor("late")}, jobQueues(t, b, id))

	// No route within the grace: stuck, as before the grace existed.
	short := relay(200 * time.Millisecond)
	orphan := b.add(t, "op.none", `{}`)
	_, err = short.RelayOnce(ctx)
	require.NoError(t, err)
	require.True(t, messageOf(t, b, orphan).Waiting)
	require.Eventually(t, func() bool {
		_, err := short.RelayOnce(ctx)
		require.NoError(t, err)
		return messageOf(t, b, orphan).Status == "stuck"
	}, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, ErrNoRoute.Error(), *messageOf(t, b, orphan).LastError)

	// Reset gives it a new wait, and a route, when one exists, takes it.
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		d, msgs, err := Reset(ctx, tx, b.client, []int64{orphan}, 0)
		require.Zero(t, d)
		require.Equal(t, 1, msgs)
		return err
	}))
	require.Equal(t, messageState{Status: "pending"}, messageOf(t, b, orphan))
	_, err = relay(time.Hour, webhook("op.none", "found")).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, "relayed", messageOf(t, b, orphan).Status)
	require.Equal(t, map[string]string{"found": QueueFor("found")}, jobQueues(t, b, orphan))
}

// TestReset_RouteQueue: a stuck delivery goes back in its route's queue,
// where only workers with the route fetch it.
func TestReset_RouteQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO ferry_outbox (topic, payload, status, last_error)
		VALUES ('op.broken', '{}', 'stuck', 'route broken-recv: route not configured on this worker') RETURNING id`).Scan(&id))
	_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox_delivery (message_id, route, status, last_error)
		VALUES ($1, 'broken-recv', 'stuck', 'route not configured on this worker')`, id)
	require.NoError(t, err)

	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		d, m, err := Reset(ctx, tx, b.client, []int64{id}, 0)
		require.Equal(t, 1, d)
		require.Equal(t, 1, m)
		return err
	}))
	require.Equal(t, map[string]string{"broken-recv": QueueFor("broken-recv")}, jobQueues(t, b, id))
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE d.message_id = $1 AND d.status = 'pending' AND j.state = 'available'`, id))
	require.Equal(t, "relayed", messageOf(t, b, id).Status)
}

// TestDeliverWorker_RouteQueues runs a River client working the shared
// queue and two routes' queues, with a worker that has only one of the
// routes: a delivery in the shared queue (as relayed before routes had
// queues) is forwarded to its route's queue and delivered there; one for a
// route this worker lacks is forwarded too and, in its route's queue,
// waits for a worker that has it, visibly, never stuck.
func TestDeliverWorker_RouteQueues(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	b := &deliverBundle{pool: pool, logs: &logtest.Recorder{}}
	srv := statusHook(t, http.StatusNoContent, "")
	w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))

	client := newRiverClient(t, pool, w, map[string]river.QueueConfig{
		Queue: {MaxWorkers: 2}, QueueFor("billing"): {MaxWorkers: 2},
		// A misconfiguration: a route's queue worked without the route.
		QueueFor("retired"): {MaxWorkers: 2},
	})
	startRiver(t, client)

	known := b.seed(t, testTopic, `{}`, "billing")
	unknown := b.seed(t, testTopic, `{}`, "retired")
	var legacy []int64
	for _, a := range []DeliverArgs{{MessageID: known, Route: "billing"}, {MessageID: unknown, Route: "retired"}} {
		// The job and the delivery's record of it in one transaction, as the
		// relay writes them: a job committed first could be forwarded (and
		// its delivery pointed at the new job) before this UPDATE pointed it
		// back at the old one.
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			res, err := client.InsertTx(ctx, tx, a, &river.InsertOpts{Queue: Queue, MaxAttempts: 24})
			if err != nil {
				return err
			}
			legacy = append(legacy, res.Job.ID)
			_, err = tx.Exec(ctx, `UPDATE ferry_outbox_delivery SET job_id = $3 WHERE message_id = $1 AND route = $2`, a.MessageID, a.Route, res.Job.ID)
			return err
		}))
	}

	require.Eventually(t, func() bool { return b.delivery(t, known, "billing").Status == "delivered" }, 10*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, b.delivery(t, known, "billing").Attempts, "forwarding is not an attempt")
	require.Equal(t, "delivered", b.message(t, known).Status)
	require.Eventually(t, func() bool { // River records completions in batches, after Work returns
		return count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
			WHERE d.message_id = $1 AND j.queue = $2 AND j.state = 'completed'`, known, QueueFor("billing")) == 1
	}, 10*time.Second, 20*time.Millisecond, "delivered from the route's queue")

	// The other waits in its route's queue: snoozed by a worker without the
	// route, its delivery pending with the reason.
	require.Eventually(t, func() bool {
		return count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
			WHERE d.message_id = $1 AND j.queue = $2 AND j.state = 'scheduled' AND (j.metadata->>'snoozes')::int >= 1`, unknown, QueueFor("retired")) == 1
	}, 10*time.Second, 20*time.Millisecond)
	d := b.delivery(t, unknown, "retired")
	require.Equal(t, "pending", d.Status, "never stuck for a route another worker may have")
	require.Zero(t, d.Attempts)
	require.NotNil(t, d.LastError)
	require.Equal(t, "waiting for a route: route not configured on this worker", *d.LastError)
	require.Equal(t, "relayed", b.message(t, unknown).Status)
	require.Equal(t, 2, count(t, pool, `SELECT count(*) FROM river_job WHERE id = ANY($1) AND state = 'completed'`, legacy),
		"the shared queue's jobs were completed, forwarded")
}
