package liveness_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/outbox"
)

// The outbox's routes of live workers, with real liveness workers: the
// relay and the route sweeper count a route only while a worker that
// published it holds its liveness lock. (These tests live here, not in
// package outbox: outbox is a module of its own that links only River and
// pgx, and liveness is the worker's.)

// liveWorker starts a real liveness worker on url: the ferry_worker row and
// the lock a worker process holds while it lives.
func liveWorker(t *testing.T, url, clientID string) *liveness.Worker {
	t.Helper()
	w, err := liveness.New(liveness.Config{DatabaseURL: url, ClientID: clientID, Tick: time.Second, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	t.Cleanup(w.Stop)
	require.NotZero(t, w.ID(), "the worker registered")
	return w
}

type relayBundle struct {
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
}

func relaySetup(t *testing.T) (*relayBundle, string) {
	t.Helper()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	require.NoError(t, err)
	return &relayBundle{pool: pool, client: client}, url
}

func (b *relayBundle) relay(t *testing.T, routes ...outbox.Route) *outbox.Relay {
	t.Helper()
	return outbox.NewRelay(outbox.RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, routes...), Logger: slog.New(slog.DiscardHandler)})
}

func (b *relayBundle) add(t *testing.T, topic string, payload any) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) (err error) {
		id, err = outbox.Add(context.Background(), tx, topic, payload)
		return err
	}))
	return id
}

func webhook(topic, name string) outbox.Route {
	return outbox.Route{Topic: topic, Name: name, URL: "http://127.0.0.1:1/hook"}
}

func mustRoutes(t *testing.T, routes ...outbox.Route) *outbox.Routes {
	t.Helper()
	rs, err := outbox.NewRoutes(routes...)
	require.NoError(t, err)
	return rs
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
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
}

func messageOf(t *testing.T, b *relayBundle, id int64) messageState {
	t.Helper()
	var m messageState
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, last_error FROM ferry_outbox WHERE id = $1`, id).
		Scan(&m.Status, &m.LastError))
	return m
}

// deliveryState is a delivery as the sweep leaves it, with its job's state.
type deliveryState struct {
	Status    string
	LastError *string
	Waiting   bool
	JobID     int64
	JobState  string
}

func deliveryOf(t *testing.T, b *relayBundle, messageID int64, route string) deliveryState {
	t.Helper()
	var d deliveryState
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT d.status, d.last_error, d.route_wait_since IS NOT NULL, d.job_id, j.state::text
		FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE d.message_id = $1 AND d.route = $2`, messageID, route).
		Scan(&d.Status, &d.LastError, &d.Waiting, &d.JobID, &d.JobState))
	return d
}

// TestRelay_RoutesOfLiveWorkers: a relay fans a message out to its own
// routes and to those every live worker published, whichever replica it
// runs on; the routes of a worker whose lock is gone, or that never held
// one, do not count.
func TestRelay_RoutesOfLiveWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, url := relaySetup(t)
	pool := b.pool

	remote := liveWorker(t, url, "remote-1")
	require.NoError(t, outbox.Publish(ctx, pool, "remote-1", mustRoutes(t, webhook("order.placed", "crm"), webhook("audit.logged", "audit"))))
	// Published by a process with no liveness row, so never alive.
	require.NoError(t, outbox.Publish(ctx, pool, "ghost", mustRoutes(t, webhook("order.placed", "ghost"))))
	live, err := outbox.LiveRoutes(ctx, pool)
	require.NoError(t, err)
	require.Equal(t, map[string][]string{"audit.logged": {"audit"}, "order.placed": {"crm"}}, live)

	r := b.relay(t, webhook("order.placed", "billing")) // this process's own
	placed := b.add(t, "order.placed", `{}`)
	audited := b.add(t, "audit.logged", `{}`)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, map[string]string{"billing": outbox.QueueFor("billing"), "crm": outbox.QueueFor("crm")}, jobQueues(t, b, placed),
		"one delivery per route of any live worker, each in its route's queue")
	require.Equal(t, map[string]string{"audit": outbox.QueueFor("audit")}, jobQueues(t, b, audited),
		"a topic this relay's process does not route at all")
	require.Equal(t, 3, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE d.route = j.args->>'route' AND d.message_id = (j.args->>'message_id')::bigint`), "each delivery recorded with its job")
	require.Equal(t, "relayed", messageOf(t, b, audited).Status)

	// The remote worker stops: its lock is released, its routes no longer
	// count, and a new worker's publication deletes them.
	remote.Stop()
	live, err = outbox.LiveRoutes(ctx, pool)
	require.NoError(t, err)
	require.Empty(t, live)
	stats, err := outbox.Stats(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, stats, outbox.Stat{Topic: "audit.logged", Route: "audit", Status: outbox.StatusWaiting, Count: 1, Of: outbox.StatDeliveries},
		"a pending delivery whose route no live worker has waits, visibly")
	later := b.add(t, "audit.logged", `{}`)
	placedLater := b.add(t, "order.placed", `{}`)
	_, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"billing": outbox.QueueFor("billing")}, jobQueues(t, b, placedLater))
	m := messageOf(t, b, later)
	require.Equal(t, "pending", m.Status, "waits for a route, not stuck")
	require.Equal(t, outbox.ErrWaitingForRoute.Error(), *m.LastError)

	liveWorker(t, url, "remote-2")
	require.NoError(t, outbox.Publish(ctx, pool, "remote-2", mustRoutes(t, webhook("audit.logged", "audit"))))
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry_outbox_route WHERE client_id = 'remote-1'`), "a stopped worker's routes are deleted")
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the waiting message is relayed once a live worker routes its topic")
	require.Equal(t, map[string]string{"audit": outbox.QueueFor("audit")}, jobQueues(t, b, later))
	m = messageOf(t, b, later)
	require.Equal(t, "relayed", m.Status)
	require.Nil(t, m.LastError)
}

// TestRouteSweeper: the deliveries of a route that no live worker declares
// any more wait for it, visibly; a worker declaring it again ends the
// wait; after the grace they are stuck and their jobs cancelled, and
// outbox.Reset puts them back with one job and a new grace.
func TestRouteSweeper(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b, url := relaySetup(t)
	pool, client := b.pool, b.client
	sweeper := outbox.RouteSweeper{Pool: pool, Client: client, Grace: time.Hour, Logger: slog.New(slog.DiscardHandler)}
	sweep := func(s outbox.RouteSweeper) (waiting, stuck int) {
		t.Helper()
		waiting, stuck, err := s.SweepOnce(ctx)
		require.NoError(t, err)
		return waiting, stuck
	}

	first := liveWorker(t, url, "first")
	require.NoError(t, outbox.Publish(ctx, pool, "first", mustRoutes(t, webhook("audit.logged", "audit"))))
	id := b.add(t, "audit.logged", `{}`)
	n, err := b.relay(t).RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	w, s := sweep(sweeper)
	require.Zero(t, w, "the route is live")
	require.Zero(t, s)
	require.False(t, deliveryOf(t, b, id, "audit").Waiting)

	// The route's only worker goes (a deploy removed the route): the
	// delivery waits for it, once marked.
	first.Stop()
	w, s = sweep(sweeper)
	require.Equal(t, 1, w)
	require.Zero(t, s)
	d := deliveryOf(t, b, id, "audit")
	require.True(t, d.Waiting)
	require.Equal(t, "pending", d.Status)
	require.Equal(t, "available", d.JobState)
	stats, err := outbox.Stats(ctx, pool)
	require.NoError(t, err)
	require.Contains(t, stats, outbox.Stat{Topic: "audit.logged", Route: "audit", Status: outbox.StatusWaiting, Count: 1, Of: outbox.StatDeliveries})
	w, _ = sweep(sweeper)
	require.Zero(t, w, "marked once")

	// A worker declares the route again: the wait ends.
	second := liveWorker(t, url, "second")
	require.NoError(t, outbox.Publish(ctx, pool, "second", mustRoutes(t, webhook("audit.logged", "audit"))))
	w, s = sweep(sweeper)
	require.Zero(t, w)
	require.Zero(t, s)
	require.False(t, deliveryOf(t, b, id, "audit").Waiting, "the wait ends when the route is back")

	// Gone again, and this time for longer than the grace (a grace of a
	// nanosecond: the wait began in an earlier transaction).
	second.Stop()
	w, _ = sweep(sweeper)
	require.Equal(t, 1, w)
	short := sweeper
	short.Grace = time.Nanosecond
	w, s = sweep(short)
	require.Zero(t, w)
	require.Equal(t, 1, s)
	d = deliveryOf(t, b, id, "audit")
	require.Equal(t, "stuck", d.Status)
	require.Equal(t, outbox.ErrRouteGone.Error(), *d.LastError)
	require.Equal(t, "cancelled", d.JobState, "its job is cancelled with it: no second job of one delivery remains")
	m := messageOf(t, b, id)
	require.Equal(t, "stuck", m.Status)
	require.Equal(t, "route audit: "+outbox.ErrRouteGone.Error(), *m.LastError)
	oldJob := d.JobID

	// Reset: pending again, with a new job and a new grace.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		deliveries, _, err := outbox.Reset(ctx, tx, client, []int64{id}, 0)
		require.Equal(t, 1, deliveries)
		return err
	}))
	d = deliveryOf(t, b, id, "audit")
	require.Equal(t, "pending", d.Status)
	require.False(t, d.Waiting, "a new grace")
	require.NotEqual(t, oldJob, d.JobID)
	require.Equal(t, "available", d.JobState)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver'
		AND (args->>'message_id')::bigint = $1 AND state NOT IN ('cancelled', 'completed', 'discarded')`, id))
}
