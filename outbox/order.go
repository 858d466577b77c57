package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/jobs"
)

// Ordered delivery (see the package doc): for each route and each
// (topic, ordering key), at most one delivery has a job at a time, the
// key's first undelivered message's. Three places hand the turn on, each
// holding the chain's advisory transaction lock (sqlOrderLocks), so that
// none misses another's commit:
//
//   - the relay (order): a keyed delivery gets its job only when it is
//     the first of its chain in the batch and the message before it is
//     delivered to the route (or has no delivery to it); the others are
//     recorded waiting, job_id NULL;
//   - the delivery that completes (advance): in its own transaction, the
//     chain's next waiting delivery gets its job;
//   - the relay's release pass (Relay.ReleaseOnce), for what neither did:
//     a successor's job refused by a full queue, a predecessor deleted by
//     hand, a completion outside River's work context.
//
// A stuck delivery hands nothing on: its key is blocked for its route
// until Reset gives it a new job, and its delivery hands the turn on.

// sqlOrderLocks takes the advisory transaction locks of the chains
// ($1 routes, $2 topics, $3 keys, parallel), in the order of their lock
// keys, so that two transactions locking several never deadlock.
const sqlOrderLocks = `SELECT count(pg_advisory_xact_lock(k)) FROM (
	SELECT DISTINCT hashtextextended('ferry.outbox.order/' || r || '/' || t || '/' || k, 0) AS k
	FROM unnest($1::text[], $2::text[], $3::text[]) AS u(r, t, k) ORDER BY 1) s`

// sqlPredecessorOpen is the condition, on u(route, topic, key, id), that
// the chain's message before id is not done with the route: still pending
// (its relay decides its turn), or its delivery to the route not
// delivered (waiting, running, retrying or stuck). Messages with no
// delivery to the route (relayed before the route existed, stuck for
// want of one) are no link of its chain. Only the latest link counts:
// a delivery gets its job after every earlier one was delivered.
const sqlPredecessorOpen = `coalesce((
	SELECT p.status = 'pending' OR pd.status <> 'delivered'
	FROM ferry_outbox p LEFT JOIN ferry_outbox_delivery pd ON pd.message_id = p.id AND pd.route = u.route
	WHERE p.topic = u.topic AND p.ordering_key = u.key AND p.id < u.id
	  AND (p.status = 'pending' OR pd.message_id IS NOT NULL)
	ORDER BY p.id DESC LIMIT 1), false)`

// order says which deliveries of a relay batch (parallel slices: route,
// topic, ordering key or "", message id) wait behind their chain: every
// keyed delivery but the first of its chain in the batch, and that one
// too when the message before it is not done with the route. It locks the
// batch's chains first.
func order(ctx context.Context, tx pgx.Tx, routes, topics, keys []string, ids []int64) ([]bool, error) {
	type chain struct{ route, topic, key string }
	first := map[chain]int64{}
	for i, key := range keys {
		if key == "" {
			continue
		}
		c := chain{routes[i], topics[i], key}
		if f, ok := first[c]; !ok || ids[i] < f {
			first[c] = ids[i]
		}
	}
	var cr, ct, ck []string
	var cid []int64
	for c, id := range first {
		cr, ct, ck, cid = append(cr, c.route), append(ct, c.topic), append(ck, c.key), append(cid, id)
	}
	if _, err := tx.Exec(ctx, sqlOrderLocks, cr, ct, ck); err != nil {
		return nil, fmt.Errorf("lock ordered chains: %w", err)
	}
	rows, err := tx.Query(ctx, `SELECT `+sqlPredecessorOpen+`
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS u(route, topic, key, id, n) ORDER BY n`, cr, ct, ck, cid)
	if err != nil {
		return nil, fmt.Errorf("read ordered chains: %w", err)
	}
	open, err := pgx.CollectRows(rows, pgx.RowTo[bool])
	if err != nil {
		return nil, fmt.Errorf("read ordered chains: %w", err)
	}
	blocked := map[chain]bool{}
	for i := range cr {
		blocked[chain{cr[i], ct[i], ck[i]}] = open[i]
	}
	wait := make([]bool, len(keys))
	for i, key := range keys {
		if key == "" {
			continue
		}
		c := chain{routes[i], topics[i], key}
		wait[i] = blocked[c] || ids[i] != first[c]
	}
	return wait, nil
}

// sqlNext reads the delivery to route $1 that follows message $4 in its
// chain (topic $2, key $3), when it waits for its turn (pending, no job):
// its message's id and trace context.
const sqlNext = `SELECT m.id, m.traceparent, m.tracestate, d.status = 'pending' AND d.job_id IS NULL
	FROM ferry_outbox m LEFT JOIN ferry_outbox_delivery d ON d.message_id = m.id AND d.route = $1
	WHERE m.topic = $2 AND m.ordering_key = $3 AND m.id > $4
	  AND (m.status = 'pending' OR d.message_id IS NOT NULL)
	ORDER BY m.id LIMIT 1`

// advance hands the turn of msg's chain on for route, in tx, which has
// just recorded msg's delivery delivered: the next waiting delivery gets
// its job. Without an inserter (outside River's work context), or when
// the job's queue is full, the relay's release pass does it later.
func advance(ctx context.Context, tx pgx.Tx, ins Inserter, msg Message, route string, maxAttempts int) (released int64, err error) {
	if msg.OrderingKey == "" || ins == nil {
		return 0, nil
	}
	if _, err := tx.Exec(ctx, sqlOrderLocks, []string{route}, []string{msg.Topic}, []string{msg.OrderingKey}); err != nil {
		return 0, fmt.Errorf("lock the ordered chain: %w", err)
	}
	var (
		next          int64
		parent, state *string
		waiting       *bool
	)
	err = tx.QueryRow(ctx, sqlNext, route, msg.Topic, msg.OrderingKey, msg.ID).Scan(&next, &parent, &state, &waiting)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && (waiting == nil || !*waiting)) {
		return 0, nil // the chain's end, or its next message is not relayed yet
	}
	if err != nil {
		return 0, fmt.Errorf("read the chain's next delivery: %w", err)
	}
	n, err := startWaiting(ctx, tx, ins, []int64{next}, []string{route}, []*string{parent}, []*string{state}, maxAttempts)
	if err != nil || n == 0 {
		return 0, err
	}
	return next, nil
}

// startWaiting inserts the jobs of waiting deliveries (parallel slices),
// in a savepoint, and records them. A queue that refuses them as full
// leaves them waiting: it returns 0 and no error.
func startWaiting(ctx context.Context, tx pgx.Tx, ins Inserter, ids []int64, routes []string, parents, states []*string, maxAttempts int) (int, error) {
	params := make([]river.InsertManyParams, len(ids))
	for i := range ids {
		md, err := traceparent.SetMetadata(nil, deref(parents[i]), deref(states[i]))
		if err != nil {
			return 0, err
		}
		params[i] = river.InsertManyParams{
			Args:       DeliverArgs{MessageID: ids[i], Route: routes[i]},
			InsertOpts: &river.InsertOpts{Queue: QueueFor(routes[i]), MaxAttempts: cmp.Or(maxAttempts, DefaultMaxAttempts), Metadata: md},
		}
	}
	jobIDs := make([]int64, len(ids))
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		res, err := ins.InsertManyTx(ctx, sp, params)
		if err != nil {
			return jobs.AsQueueFull(err)
		}
		for i, r := range res {
			jobIDs[i] = r.Job.ID
		}
		_, err = sp.Exec(ctx, `UPDATE ferry_outbox_delivery d SET job_id = u.job_id, updated_at = now()
			FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(message_id, route, job_id)
			WHERE d.message_id = u.message_id AND d.route = u.route AND d.status = 'pending' AND d.job_id IS NULL`, ids, routes, jobIDs)
		return err
	})
	if errors.Is(err, jobs.ErrQueueFull) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("start waiting deliveries: %w", err)
	}
	return len(ids), nil
}

// sqlReleasable lists, oldest first, the first waiting delivery of each
// chain whose predecessor is done with the route: its turn came and no
// job was inserted for it.
const sqlReleasable = `WITH heads AS (
		SELECT d.route, m.topic, m.ordering_key AS key, min(m.id) AS id
		FROM ferry_outbox_delivery d JOIN ferry_outbox m ON m.id = d.message_id
		WHERE d.status = 'pending' AND d.job_id IS NULL AND m.ordering_key IS NOT NULL
		GROUP BY 1, 2, 3)
	SELECT u.route, u.topic, u.key, u.id, m.traceparent, m.tracestate
	FROM heads u JOIN ferry_outbox m ON m.id = u.id
	WHERE NOT ` + sqlPredecessorOpen + `
	ORDER BY u.id LIMIT $1`

// ReleaseOnce gives their jobs to up to BatchSize waiting deliveries of
// ordered chains whose turn came without one (see the package doc,
// "Ordered delivery"), and returns how many it released. The relay runs
// it every PollInterval; normally there is nothing to do, as the delivery
// that completes starts its successor itself.
func (r *Relay) ReleaseOnce(ctx context.Context) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		type head struct {
			route, topic, key string
			id                int64
			parent, state     *string
		}
		read := func() ([]head, error) {
			rows, err := tx.Query(ctx, sqlReleasable, r.cfg.BatchSize)
			if err != nil {
				return nil, err
			}
			var h head
			var out []head
			_, err = pgx.ForEachRow(rows, []any{&h.route, &h.topic, &h.key, &h.id, &h.parent, &h.state}, func() error {
				out = append(out, h)
				return nil
			})
			return out, err
		}
		heads, err := read()
		if err != nil || len(heads) == 0 {
			return err
		}
		var rs, ts, ks []string
		for _, h := range heads {
			rs, ts, ks = append(rs, h.route), append(ts, h.topic), append(ks, h.key)
		}
		if _, err := tx.Exec(ctx, sqlOrderLocks, rs, ts, ks); err != nil {
			return fmt.Errorf("lock ordered chains: %w", err)
		}
		// Read again under the locks: a completion may have started one.
		again, err := read()
		if err != nil {
			return err
		}
		again = slices.DeleteFunc(again, func(a head) bool {
			return !slices.ContainsFunc(heads, func(h head) bool { return h.route == a.route && h.topic == a.topic && h.key == a.key })
		})
		// One at a time: a full queue keeps its own deliveries waiting,
		// not the others'.
		for _, h := range again {
			started, err := startWaiting(ctx, tx, r.cfg.Inserter, []int64{h.id}, []string{h.route}, []*string{h.parent}, []*string{h.state}, r.cfg.MaxAttempts)
			if err != nil {
				return err
			}
			n += started
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: release ordered deliveries: %w", err)
	}
	return n, nil
}
