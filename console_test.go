package ferry_test

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry"
	"github.com/ferryq/ferry/internal/admin"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// The admin summary of a real server over Postgres: this process as the
// leader, a stuck delivery and a message stuck for want of a route, a
// running job, failed jobs
// (waiting to retry, and discarded lately but not long ago), and the one
// schedule more than a minute late.
func TestConsole_Summary(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	cfg := quietConfig(url)
	cfg.Queues.ShutdownGrace = 100 * time.Millisecond
	srv, err := ferry.New(ctx, cfg)
	require.NoError(t, err)
	stop := runServer(t, srv)
	pool := pgtest.PoolFor(t, url)

	running := insertNoop(t, pool, jobs.NoopArgs{Sleep: jobs.Duration(time.Hour)})
	waitState(t, pool, running, rivertype.JobStateRunning)
	// Rows in the states the summary counts, where no worker touches them:
	// a retry a day away, a job discarded an hour ago, one two days ago.
	_, err = pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, attempt, scheduled_at, finalized_at) VALUES
		('{}', 'ferry.noop', 5, 'default', 'retryable', 1, now() + interval '1 day', NULL),
		('{}', 'ferry.noop', 1, 'default', 'discarded', 1, now() - interval '1 hour', now() - interval '1 hour'),
		('{}', 'ferry.noop', 1, 'default', 'discarded', 1, now() - interval '2 days', now() - interval '2 days')`)
	require.NoError(t, err)
	// Schedules as a stalled leader leaves them: one ten minutes past its
	// run, one ten seconds past (within a failover, not late).
	_, err = pool.Exec(ctx, `INSERT INTO ferry_schedule (id, name, trigger, zone, kind, queue, next_run_at) VALUES
		('stalled', 'Stalled export', 'every 1h', 'UTC', 'ferry.noop', 'default', now() - interval '10 minutes'),
		('due', 'Due now', 'every 1h', 'UTC', 'ferry.noop', 'default', now() - interval '10 seconds')`)
	require.NoError(t, err)
	// Outbox rows as the relay and the delivery worker leave them: a
	// message stuck for want of a route (no delivery), and one whose one
	// delivery is stuck.
	_, err = pool.Exec(ctx, `WITH m AS (
		INSERT INTO ferry_outbox (topic, payload, status, last_error) VALUES
			('nobody.listens', '{}', 'stuck', 'no route for topic'), ('order.placed', '{}', 'stuck', 'status 410')
		RETURNING id, topic)
		INSERT INTO ferry_outbox_delivery (message_id, route, status, attempts, last_error)
		SELECT id, 'billing', 'stuck', 1, 'status 410' FROM m WHERE topic = 'order.placed'`)
	require.NoError(t, err)
	require.Eventually(t, srv.Elector().IsLeader, 10*time.Second, 20*time.Millisecond)

	resp, err := http.Get("http://" + srv.AdminAddr() + "/admin/api/summary")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, srv.River().ID(), resp.Header.Get("Ferry-Replica"), "the answer names its replica")
	var sum admin.Summary
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sum))

	host, _ := os.Hostname()
	require.Equal(t, admin.Replica{Name: srv.River().ID(), Hostname: host, PID: os.Getpid(), Role: "leader", Term: srv.Elector().Term()}, sum.Replica)
	require.NotNil(t, sum.Leader)
	require.Equal(t, os.Getpid(), *sum.Leader.PID)
	require.Equal(t, int64(1), sum.StuckDeliveries)
	require.Equal(t, int64(1), sum.StuckMessages, "the message without a route, not the one with a stuck delivery")
	require.Equal(t, admin.JobCounts{Running: 1, Retryable: 1, Discarded: 1}, sum.Jobs)
	require.Len(t, sum.LateSchedules, 1)
	require.Equal(t, "stalled", sum.LateSchedules[0].ID)
	require.Equal(t, "Stalled export", sum.LateSchedules[0].Name)

	require.NoError(t, stop())
}
