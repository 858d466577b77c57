package broadcastcap

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ferryq/ferry/broadcast"
	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/admin"
)

// announcer tells the admin consoles of every replica
// (admin.EventsChannel) what changed, from the leader: that it started or
// stopped leading, and that stuck deliveries or held locks changed.
type announcer struct {
	broker *broadcast.Broker
	pool   *pgxpool.Pool
	term   func() int64
	tick   time.Duration
	logger *slog.Logger
	// releasing holds the leader-release announcements a demotion left
	// running; Close waits for them.
	releasing *sync.WaitGroup
}

// leader is the leader runnable "broadcast-leader": it announces when
// this process starts and stops leading, so that the consoles show the
// new leader without a reload.
func (a announcer) leader(ctx context.Context) error {
	if err := a.broker.Publish(ctx, admin.EventsChannel, map[string]any{"leader": "acquired", "term": a.term()}); err != nil {
		a.logger.Warn("broadcast: leader change not announced", "error", err)
	}
	<-ctx.Done()
	// Best effort, and well within the tick the elector gives its
	// runnables to stop: a partitioned leader's announcement cannot land,
	// and waiting longer would only make a demotion look like runnables
	// that would not stop.
	release := func() {
		pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(2*time.Second, a.tick/2))
		defer cancel()
		if err := a.broker.Publish(pctx, admin.EventsChannel, map[string]any{"leader": "released"}); err != nil {
			a.logger.Debug("broadcast: leader release not announced", "error", err)
		}
	}
	if !election.Demoted(ctx) {
		// A stop: the process may exit next, so the announcement goes
		// before the runnable returns.
		release()
		return nil
	}
	// Demoted: the failed check may mean the database is out of reach. The
	// demotion does not wait on the announcement (at a 1 s tick a
	// partitioned leader was demoted 500 ms later for it, up to 1.8 s
	// after the cut, past the tick and its timeout); Close waits for it.
	a.releasing.Go(release)
	return nil
}

// consoleWatchEvery is how often the leader looks for console changes that
// no single code path announces.
const consoleWatchEvery = time.Second

// sqlConsoleWatch fingerprints the stuck outbox deliveries (a partial
// index covers them), the named locks held now, and the writes to the
// workflows' tables (Postgres's own counters of rows written, read without
// touching the tables: a step that ends, a workflow added or ended).
const sqlConsoleWatch = `SELECT
    (SELECT md5(coalesce(string_agg(message_id || '/' || route, ',' ORDER BY message_id, route), ''))
       FROM ferry_outbox_delivery WHERE status = 'stuck'),
    (SELECT md5(coalesce(string_agg(name || '#' || token, ',' ORDER BY name), ''))
       FROM ferry_lock WHERE expires_at > now()),
    (SELECT md5(coalesce(sum(n_tup_ins + n_tup_upd + n_tup_del), 0)::text)
       FROM pg_stat_user_tables WHERE relid IN ('ferry_workflow'::regclass, 'ferry_workflow_step'::regclass))`

// emptyFingerprint is sqlConsoleWatch's fingerprint of nothing, the md5
// of the empty string.
const emptyFingerprint = "d41d8cd98f00b204e9800998ecf8427e"

// console is the leader runnable "broadcast-console": the deliveries
// that become stuck, the named locks taken and released and the workflows'
// steps change in many places (a delivery job on any worker, the route sweep, a reset, any
// process using package locks, plain SQL), so the leader compares their
// fingerprint every second and announces a change on admin.EventsChannel,
// once for all the consoles. Its first look compares with nothing stuck
// and no lock held, so a new leader announces what there is: the consoles
// catch up with what changed while no one watched (a failover), and
// whatever was written just before it started is never taken for the
// baseline.
func (a announcer) console(ctx context.Context) error {
	t := time.NewTicker(consoleWatchEvery)
	defer t.Stop()
	last := [3]string{emptyFingerprint, emptyFingerprint, emptyFingerprint}
	for {
		var now [3]string
		if err := a.pool.QueryRow(ctx, sqlConsoleWatch).Scan(&now[0], &now[1], &now[2]); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			a.logger.Debug("broadcast: console watch failed", "error", err)
		} else {
			for i, what := range []string{"outbox_stuck", "locks", "workflows"} {
				if now[i] != last[i] {
					if err := a.broker.Publish(ctx, admin.EventsChannel, map[string]string{"changed": what}); err != nil && ctx.Err() == nil {
						a.logger.Warn("broadcast: console change not announced", "changed", what, "error", err)
					}
				}
			}
			last = now
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
