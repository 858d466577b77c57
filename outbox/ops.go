package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
)

// Querier is what the read-side functions run on (a pool, a conn, a tx).
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// Stat is a count of messages by topic and status (Of StatMessages, no
// Route), or of deliveries by topic, route and status (Of
// StatDeliveries).
type Stat struct {
	Topic  string `json:"topic"`
	Route  string `json:"route,omitempty"`
	Status string `json:"status"`
	Count  int64  `json:"count"`
	Of     string `json:"of"`
}

// What a Stat counts.
const (
	StatMessages   = "messages"
	StatDeliveries = "deliveries"
)

// StatusWaiting is the state Stats reports for a pending message whose
// topic no live worker routes, while it waits for one (its last_error is
// ErrWaitingForRoute); ListFilter.Status "waiting" selects these messages.
const StatusWaiting = "waiting for a route"

// States Stats and List report for the deliveries of ordered messages
// (WithOrderingKey) that have no job yet: StatusTurn waits for the
// delivery before it in its chain (running or retrying), StatusBlocked
// for one that is stuck, until Reset puts it back. ListFilter.Status
// "blocked" selects the blocked ones.
const (
	StatusTurn    = "waiting for its turn"
	StatusBlocked = "blocked"
)

// sqlWaitState is the state of delivery d of message o: StatusBlocked or
// StatusTurn for an ordered delivery that waits for its turn, d.status
// otherwise.
const sqlWaitState = `CASE WHEN d.status = 'pending' AND d.job_id IS NULL AND o.ordering_key IS NOT NULL THEN
		CASE WHEN EXISTS (SELECT 1 FROM ferry_outbox_delivery sd JOIN ferry_outbox so ON so.id = sd.message_id
			WHERE sd.route = d.route AND sd.status = 'stuck' AND so.topic = o.topic AND so.ordering_key = o.ordering_key
			  AND so.chain_seq IS NOT NULL AND (so.chain_seq, so.id) < (o.chain_seq, o.id))
		THEN '` + StatusBlocked + `' ELSE '` + StatusTurn + `' END
	END`

// Stats counts messages by topic and status, and deliveries by topic, route
// and status. Pending messages that wait for a route, and pending
// deliveries whose route no live worker declares (they wait in the route's
// queue for a worker that has it: a worker stopped, or a route removed by a
// deploy), are counted apart, with the status StatusWaiting; so are the
// ordered deliveries that wait for their turn (StatusTurn) or behind a
// stuck one (StatusBlocked).
func Stats(ctx context.Context, q Querier) ([]Stat, error) {
	rows, err := q.Query(ctx, `WITH live AS (`+sqlLive+`)
		SELECT topic, '' AS route,
		       CASE WHEN status = 'pending' AND route_wait_since IS NOT NULL THEN $1 ELSE status END AS status, count(*), $2 AS of
		FROM ferry_outbox GROUP BY 1, 2, 3
		UNION ALL
		SELECT o.topic, d.route,
		       coalesce(`+sqlWaitState+`,
		         CASE WHEN d.status = 'pending' AND NOT EXISTS (SELECT 1 FROM live WHERE live.route = d.route) THEN $1 ELSE d.status END),
		       count(*), $3
		FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id
		GROUP BY 1, 2, 3
		ORDER BY 1, 2, 3`, StatusWaiting, StatMessages, StatDeliveries)
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Stat])
	if err != nil {
		return nil, fmt.Errorf("outbox: stats: %w", err)
	}
	return out, nil
}

// Delivery is one (message, route) delivery with its message.
type Delivery struct {
	MessageID     int64      `json:"message_id"`
	Topic         string     `json:"topic"`
	MessageStatus string     `json:"message_status"`
	Route         *string    `json:"route"`
	Status        *string    `json:"status"`
	Attempts      *int       `json:"attempts"`
	LastError     *string    `json:"last_error"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	JobID         *int64     `json:"job_id"`
	DeliveredAt   *time.Time `json:"delivered_at"`
	CreatedAt     time.Time  `json:"created_at"`
	OrderingKey   *string    `json:"ordering_key"`
	// Wait is StatusTurn or StatusBlocked for an ordered delivery that
	// waits for its turn (Status is pending), "" otherwise.
	Wait string `json:"wait,omitempty"`
}

// ListFilter narrows List.
type ListFilter struct {
	// Status selects rows whose message or delivery has this status
	// (pending, relayed, delivered, stuck), "waiting": messages that
	// wait for a route, or "blocked": ordered deliveries waiting behind a
	// stuck one (StatusBlocked); "" for any.
	Status string
	Topic  string // "" for any
	Limit  int    // default 100
}

// List returns messages with their deliveries, newest first. A message
// with no delivery (pending, or stuck for want of a route) appears once
// with a nil route.
func List(ctx context.Context, q Querier, f ListFilter) ([]Delivery, error) {
	if f.Limit <= 0 {
		f.Limit = 100
	}
	rows, err := q.Query(ctx, `
		SELECT id, topic, message_status, route, status, attempts, last_error, next_attempt_at, job_id, delivered_at, created_at, ordering_key, wait
		FROM (
			SELECT o.id, o.topic, o.status AS message_status, d.route, d.status, d.attempts, coalesce(d.last_error, o.last_error) AS last_error,
			       d.next_attempt_at, d.job_id, coalesce(d.delivered_at, o.delivered_at) AS delivered_at, o.created_at, o.ordering_key,
			       coalesce(`+sqlWaitState+`, '') AS wait, o.route_wait_since
			FROM ferry_outbox o LEFT JOIN ferry_outbox_delivery d ON d.message_id = o.id
			WHERE ($2 = '' OR o.topic = $2)) l
		WHERE ($1 = '' OR message_status = $1 OR status = $1 OR ($1 = 'waiting' AND message_status = 'pending' AND route_wait_since IS NOT NULL)
		       OR ($1 = '`+StatusBlocked+`' AND wait = $1))
		ORDER BY id DESC, route LIMIT $3`, f.Status, f.Topic, f.Limit)
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Delivery])
	if err != nil {
		return nil, fmt.Errorf("outbox: list: %w", err)
	}
	return out, nil
}

// sqlResetWaits says, for each delivery ($1 message ids, $2 routes,
// parallel) that Reset put back, whether the link before it in its chain
// is not done with the route: an ordered delivery that must wait for its
// turn again.
var sqlResetWaits = `SELECT coalesce(prev.open, false)
	FROM unnest($1::bigint[], $2::text[]) WITH ORDINALITY AS r(id, route, n)
	CROSS JOIN LATERAL (` + sqlMessageOf("r.id") + `) o
	CROSS JOIN LATERAL (SELECT r.n, r.route, o.topic, o.ordering_key AS key, o.chain_seq AS seq, o.id) u
	LEFT JOIN LATERAL (` + sqlPredecessor + `) AS prev(id, open, delivered_at) ON true
	ORDER BY u.n`

// Reset puts stuck messages back: their stuck deliveries become pending
// with a new delivery job each, in the route's own queue (QueueFor), which
// only workers that have the route work (attempts kept, as history); a
// message stuck for want of a route goes back to pending for the relay to
// route again, to the routes live workers declare then, or to wait for one
// for a new grace period; a delivery stuck because no live worker declared
// its route (RouteSweeper) gets a new grace period too. An ordered
// delivery (WithOrderingKey) gets a job only when the one before it in
// its key's chain is delivered; the others go back to waiting for their
// turn, so that resetting a key's deliveries together (the route sweep
// sticks all of them) starts them in order, one at a time. It returns how
// many deliveries and messages it reset.
func Reset(ctx context.Context, tx pgx.Tx, inserter Inserter, ids []int64, maxAttempts int) (deliveries, messages int, err error) {
	if maxAttempts <= 0 {
		maxAttempts = DefaultMaxAttempts
	}
	// The ordered chains of the stuck deliveries, locked first: their
	// deliveries are put back in order (below).
	if _, err := tx.Exec(ctx, `SELECT count(pg_advisory_xact_lock(lk)) FROM (
			SELECT DISTINCT `+orderLockKey+` AS lk
			FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id, LATERAL (SELECT d.route, o.topic, o.ordering_key) AS c(r, t, k)
			WHERE d.message_id = ANY($1) AND d.status = 'stuck' AND o.ordering_key IS NOT NULL ORDER BY 1) s`, ids); err != nil {
		return 0, 0, fmt.Errorf("outbox: reset: lock ordered chains: %w", err)
	}
	rows, err := tx.Query(ctx, `UPDATE ferry_outbox_delivery SET status = 'pending', next_attempt_at = NULL, route_wait_since = NULL, updated_at = now()
		WHERE message_id = ANY($1) AND status = 'stuck' RETURNING message_id, route`, ids)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: reset deliveries: %w", err)
	}
	var (
		msgID  int64
		route  string
		msgIDs []int64
		routes []string
	)
	_, err = pgx.ForEachRow(rows, []any{&msgID, &route}, func() error {
		msgIDs, routes = append(msgIDs, msgID), append(routes, route)
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: reset deliveries: %w", err)
	}
	// An ordered delivery whose chain has an earlier link not delivered
	// (reset with it, or still stuck) goes back to waiting for its turn,
	// without a job: resetting a key's stuck deliveries (the route sweep
	// sticks every waiting one) must not start them side by side.
	rows, err = tx.Query(ctx, sqlResetWaits, msgIDs, routes)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: reset: read ordered chains: %w", err)
	}
	wait, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: reset: read ordered chains: %w", err)
	}
	var (
		params     []river.InsertManyParams
		waitIDs    []int64
		waitRoutes []string
	)
	k := 0
	for i := range msgIDs {
		if wait[i] {
			waitIDs, waitRoutes = append(waitIDs, msgIDs[i]), append(waitRoutes, routes[i])
			continue
		}
		msgIDs[k], routes[k] = msgIDs[i], routes[i]
		k++
		params = append(params, river.InsertManyParams{
			Args:       DeliverArgs{MessageID: msgIDs[i], Route: routes[i]},
			InsertOpts: &river.InsertOpts{Queue: QueueFor(routes[i]), MaxAttempts: maxAttempts, Priority: priorityDelivery},
		})
	}
	msgIDs, routes = msgIDs[:k], routes[:k]
	if len(waitIDs) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE ferry_outbox_delivery d SET job_id = NULL
			FROM unnest($1::bigint[], $2::text[]) AS u(message_id, route)
			WHERE d.message_id = u.message_id AND d.route = u.route`, waitIDs, waitRoutes); err != nil {
			return 0, 0, fmt.Errorf("outbox: reset: ordered deliveries back to waiting: %w", err)
		}
	}
	if len(params) > 0 {
		res, err := inserter.InsertManyTx(ctx, tx, params)
		if err != nil {
			return 0, 0, fmt.Errorf("outbox: reset: insert delivery jobs: %w", err)
		}
		jobIDs := make([]int64, len(res))
		for i, r := range res {
			jobIDs[i] = r.Job.ID
		}
		if _, err := tx.Exec(ctx, `UPDATE ferry_outbox_delivery d SET job_id = u.job_id
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(message_id, route, job_id)
			WHERE d.message_id = u.message_id AND d.route = u.route`, msgIDs, routes, jobIDs); err != nil {
			return 0, 0, fmt.Errorf("outbox: reset: record jobs: %w", err)
		}
	}
	tag, err := tx.Exec(ctx, `UPDATE ferry_outbox o SET
			status = CASE WHEN EXISTS (SELECT 1 FROM ferry_outbox_delivery d WHERE d.message_id = o.id) THEN 'relayed' ELSE 'pending' END,
			last_error = NULL, route_wait_since = NULL
		WHERE id = ANY($1) AND status = 'stuck'`, ids)
	if err != nil {
		return 0, 0, fmt.Errorf("outbox: reset messages: %w", err)
	}
	return len(params) + len(waitIDs), int(tag.RowsAffected()), nil
}
