package e2e_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/outbox"
)

// TestOutbox_RollingDeployAddsRoute deploys a route under load, as a
// rolling deploy does: worker A runs without the route for order.audited,
// B starts with it, then A is restarted with it, while a writer adds
// order.placed and order.audited messages the whole time. A message the
// route does not cover yet waits ("waiting for a route") instead of being
// stuck; once B declares the route, every relay (A's included) sends it
// there, and only workers that have the route run its deliveries. In the
// end every message is delivered once per route, none stuck, none lost
// (the handlers' plain INSERTs would fail on a second effect).
func TestOutbox_RollingDeployAddsRoute(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	createEffects(t, pool)
	_, err := pool.Exec(ctx, `CREATE TABLE audits (event_id text PRIMARY KEY)`)
	require.NoError(t, err)

	a1 := startHandlerWorker(t, url)
	a1ID := workerClientID(t, a1)

	// The load: both topics, with plain SQL, until the deploy is over. Each
	// insert commits on its own; written counts those that returned.
	var (
		written  atomic.Int64
		stopLoad atomic.Bool
	)
	loadDone := make(chan error, 1)
	go func() {
		loadDone <- func() error {
			for i := 0; !stopLoad.Load(); i++ {
				topic := "order.placed"
				if i%2 == 1 {
					topic = "order.audited"
				}
				if _, err := pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) VALUES ($1, jsonb_build_object('i', $2::int))`, topic, i); err != nil {
					return err
				}
				written.Add(1)
				time.Sleep(5 * time.Millisecond) // a pace, not a bound
			}
			return nil
		}()
	}()
	t.Cleanup(func() { stopLoad.Store(true) })
	// more waits until the writer has added n more messages.
	more := func(n int64) {
		t.Helper()
		target := written.Load() + n
		waitFor(t, 30*time.Second, "the writer to add messages", func() bool { return written.Load() >= target })
	}

	// No live worker routes order.audited yet: its messages wait, visibly.
	waitFor(t, deliverTimeout, "order.audited messages waiting for a route", func() bool {
		stats, err := outbox.Stats(ctx, pool)
		require.NoError(t, err)
		return slices.ContainsFunc(stats, func(s outbox.Stat) bool {
			return s.Topic == "order.audited" && s.Route == "" && s.Status == "waiting for a route" && s.Count >= 3
		})
	})
	stdout, stderr, code := enqueue(t, url, nil, "outbox", "stats")
	require.Zero(t, code, stderr)
	require.Regexp(t, `(?m)^order\.audited\s+\(message\)\s+waiting for a route\s+\d+$`, stdout, "enqueue outbox stats shows the wait")
	waiting := outboxList(t, url, "--status", "waiting", "--topic", "order.audited")
	require.NotEmpty(t, waiting)
	for _, d := range waiting {
		require.Equal(t, "pending", d.MessageStatus)
		require.Nil(t, d.Route)
		require.NotNil(t, d.LastError)
		require.Equal(t, "waiting for a route", *d.LastError)
	}
	require.Empty(t, outboxList(t, url, "--status", "stuck"))

	// B comes with the route; then A is restarted with it.
	b := startHandlerWorker(t, url, "HANDLER_AUDIT=1")
	bID := workerClientID(t, b)
	more(40)
	stop(t, a1, stopTimeout)
	more(20)
	a2 := startHandlerWorker(t, url, "HANDLER_AUDIT=1")
	a2ID := workerClientID(t, a2)
	more(40)
	stopLoad.Store(true)
	require.NoError(t, <-loadDone)

	total := int(written.Load())
	waitFor(t, 60*time.Second, "every message delivered", func() bool {
		return count(t, pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'delivered'`) == total
	})
	placed := count(t, pool, `SELECT count(*) FROM ferry_outbox WHERE topic = 'order.placed'`)
	audited := count(t, pool, `SELECT count(*) FROM ferry_outbox WHERE topic = 'order.audited'`)
	require.Equal(t, total, placed+audited, "none lost")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE status <> 'delivered'`), "none stuck")
	require.Equal(t, placed, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id
		WHERE o.topic = 'order.placed' AND d.route = 'effects'`))
	require.Equal(t, audited, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id
		WHERE o.topic = 'order.audited' AND d.route = 'audit'`))
	require.Equal(t, total, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery`), "one delivery per (message, route)")
	require.Equal(t, placed, count(t, pool, `SELECT count(*) FROM effects`), "one effect each")
	require.Equal(t, audited, count(t, pool, `SELECT count(*) FROM audits`), "one audit each")
	require.Equal(t, total, count(t, pool, `SELECT count(*) FROM ferry_outbox_received`))

	// The mechanism: each route's deliveries ran from its own queue, and
	// the audit's only on workers that have the route (B, and A once
	// restarted with it), never on A as first deployed.
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE j.queue <> CASE d.route WHEN 'audit' THEN $1 ELSE $2 END`, outbox.QueueFor("audit"), outbox.QueueFor("effects")))
	ranAudit := attemptedBy(t, pool, "audit")
	require.NotEmpty(t, ranAudit)
	require.NotContains(t, ranAudit, a1ID, "A without the route never ran an audit delivery")
	for _, id := range ranAudit {
		require.Contains(t, []string{bID, a2ID}, id)
	}
	require.Contains(t, attemptedBy(t, pool, "effects"), a1ID, "A did work the load while it ran")

	stop(t, b, stopTimeout)
	stop(t, a2, stopTimeout)
}

// attemptedBy returns the workers (River client ids) that ran any attempt
// of a delivery job of route.
func attemptedBy(t *testing.T, pool *pgxpool.Pool, route string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT DISTINCT w FROM ferry_outbox_delivery d
		JOIN river_job j ON j.id = d.job_id, unnest(j.attempted_by) AS w
		WHERE d.route = $1 ORDER BY 1`, route)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return ids
}

// waitFor polls cond every pollEvery until it holds, and fails the test
// after timeout (a watchdog, not a bound the test asserts).
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %s for %s", timeout, what)
		}
		time.Sleep(pollEvery)
	}
}
