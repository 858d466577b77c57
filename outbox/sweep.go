package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/loop"
)

// ErrRouteGone is why a delivery whose route no live worker has declared
// for the route grace is stuck (a route removed from every worker by a
// deploy): its text is the delivery's last_error.
var ErrRouteGone = errors.New("no live worker declares the route")

// JobCanceler cancels a River job in a transaction; *river.Client[pgx.Tx]
// implements it.
type JobCanceler interface {
	JobCancelTx(ctx context.Context, tx pgx.Tx, jobID int64) (*rivertype.JobRow, error)
}

// RouteSweeper gives the deliveries of a route that no live worker
// declares any more the same grace as a message whose topic has no route:
// such a delivery waits in its route's queue, counted as "waiting for a
// route", from the first sweep that finds the route gone
// (ferry_outbox_delivery.route_wait_since); a worker declaring the route
// again ends the wait; after Grace it is stuck with ErrRouteGone, its River
// job cancelled in the same transaction, so that `enqueue outbox reset`
// can put it back once the route exists again, and no second job of it
// remains. It runs on the leader only (a leader runnable): one sweeper at a
// time.
type RouteSweeper struct {
	Pool   *pgxpool.Pool
	Client JobCanceler
	// Grace is how long a delivery waits for its route; default
	// DefaultRouteGrace (FERRY_OUTBOX_ROUTE_GRACE, as for messages).
	Grace time.Duration
	// Every is how often it sweeps; default Grace/10, between a second and
	// a minute.
	Every  time.Duration
	Logger *slog.Logger
}

// SQL of the sweep, on the live routes as sqlLive reads them.
const (
	sqlSweepLive = `WITH live AS (` + sqlLive + `)`
	// sqlSweepClear ends the wait of the deliveries whose route a live
	// worker declares again.
	sqlSweepClear = sqlSweepLive + ` UPDATE ferry_outbox_delivery d SET route_wait_since = NULL, updated_at = now()
		WHERE d.status = 'pending' AND d.route_wait_since IS NOT NULL
		  AND EXISTS (SELECT 1 FROM live WHERE live.route = d.route)`
	// sqlSweepMark starts the wait of the pending deliveries whose route no
	// live worker declares.
	sqlSweepMark = sqlSweepLive + ` UPDATE ferry_outbox_delivery d SET route_wait_since = now(), updated_at = now()
		WHERE d.status = 'pending' AND d.route_wait_since IS NULL
		  AND NOT EXISTS (SELECT 1 FROM live WHERE live.route = d.route)`
	// sqlSweepStick makes stuck the deliveries that waited Grace ($1
	// seconds) for their route, and their messages.
	sqlSweepStick = sqlSweepLive + `, gone AS (
			UPDATE ferry_outbox_delivery d SET status = 'stuck', last_error = $2, next_attempt_at = NULL, updated_at = now()
			WHERE d.status = 'pending' AND d.route_wait_since <= now() - make_interval(secs => $1)
			  AND NOT EXISTS (SELECT 1 FROM live WHERE live.route = d.route)
			RETURNING d.message_id, d.route, d.job_id),
		msgs AS (
			UPDATE ferry_outbox o SET status = 'stuck', last_error = 'route ' || g.route || ': ' || $2
			FROM gone g WHERE o.id = g.message_id AND o.status <> 'delivered')
		SELECT message_id, route, job_id FROM gone ORDER BY message_id, route`
)

// Run sweeps every Every until ctx ends; it is a leader runnable.
func (s RouteSweeper) Run(ctx context.Context) error {
	return loop.Every(ctx, s.every(), func(ctx context.Context) error {
		_, _, err := s.SweepOnce(ctx)
		return err
	})
}

func (s RouteSweeper) grace() time.Duration {
	if s.Grace > 0 {
		return s.Grace
	}
	return DefaultRouteGrace
}

func (s RouteSweeper) every() time.Duration {
	if s.Every > 0 {
		return s.Every
	}
	return min(max(s.grace()/10, time.Second), time.Minute)
}

// SweepOnce does one sweep in one transaction: it ends the wait of the
// deliveries whose route is declared again, makes stuck (and cancels the
// jobs of) those that waited the grace out, and starts the wait of the
// pending deliveries whose route no live worker declares. It returns how
// many started to wait and how many it made stuck.
func (s RouteSweeper) SweepOnce(ctx context.Context) (waiting, stuck int, err error) {
	log := s.Logger
	if log == nil {
		log = slog.Default()
	}
	type gone struct {
		messageID int64
		route     string
		jobID     *int64
	}
	var stuckRows []gone
	err = pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlSweepClear); err != nil {
			return fmt.Errorf("end the waits of routes declared again: %w", err)
		}
		rows, err := tx.Query(ctx, sqlSweepStick, s.grace().Seconds(), ErrRouteGone.Error())
		if err != nil {
			return fmt.Errorf("stick deliveries whose route is gone: %w", err)
		}
		stuckRows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (gone, error) {
			var g gone
			return g, row.Scan(&g.messageID, &g.route, &g.jobID)
		})
		if err != nil {
			return fmt.Errorf("stick deliveries whose route is gone: %w", err)
		}
		for _, g := range stuckRows {
			if g.jobID == nil {
				continue
			}
			if _, err := s.Client.JobCancelTx(ctx, tx, *g.jobID); err != nil && !errors.Is(err, rivertype.ErrNotFound) {
				return fmt.Errorf("cancel job %d of the delivery of message %d to route %s: %w", *g.jobID, g.messageID, g.route, err)
			}
		}
		tag, err := tx.Exec(ctx, sqlSweepMark)
		if err != nil {
			return fmt.Errorf("mark deliveries whose route is gone: %w", err)
		}
		waiting = int(tag.RowsAffected())
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: route sweep: %w", err)
	}
	if waiting > 0 {
		log.Warn("outbox: deliveries wait for a route: no live worker declares it", "count", waiting, "grace", s.grace())
	}
	if len(stuckRows) > 0 {
		log.Warn("outbox: deliveries whose route no live worker declares are stuck",
			"count", len(stuckRows), "first_message_id", stuckRows[0].messageID, "route", stuckRows[0].route, "grace", s.grace())
	}
	return waiting, len(stuckRows), nil
}
