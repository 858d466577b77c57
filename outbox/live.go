package outbox

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Beginner starts transactions: a pool, a connection or a transaction.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// SQL of the route table (migration 007).
const (
	// sqlPruneRoutes deletes the routes of workers that stopped or were
	// declared dead, and those of a worker never recorded in ferry_worker
	// (its liveness never registered) after a day. Routes of a worker that
	// is merely lost stay until the rescuer declares it dead; LiveRoutes
	// ignores them meanwhile.
	sqlPruneRoutes = `DELETE FROM ferry_outbox_route r
		WHERE EXISTS (SELECT 1 FROM ferry_worker w WHERE w.client_id = r.client_id AND (w.dead_at IS NOT NULL OR w.stopped_at IS NOT NULL))
		   OR (r.published_at < now() - interval '1 day' AND NOT EXISTS (SELECT 1 FROM ferry_worker w WHERE w.client_id = r.client_id))`

	sqlPublishRoutes = `INSERT INTO ferry_outbox_route (client_id, topic, route, kind, queue)
		SELECT $1, * FROM unnest($2::text[], $3::text[], $4::text[], $5::text[])`

	// sqlLive selects the (topic, route) pairs of every live worker: one
	// whose liveness lock (ferry_liveness_namespace(), ferry_worker.id) some session
	// holds in this database, and that the rescuer has not declared dead,
	// exactly as liveness.List judges "alive".
	sqlLive = `SELECT DISTINCT r.topic, r.route FROM ferry_outbox_route r
		JOIN ferry_worker w ON w.client_id = r.client_id AND w.dead_at IS NULL
		WHERE EXISTS (SELECT 1 FROM pg_locks l
			WHERE l.locktype = 'advisory' AND l.classid = ferry_liveness_namespace()::oid AND l.objid::bigint = w.id
			  AND l.objsubid = 2 AND l.granted
			  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))`

	sqlLiveRoutes = sqlLive + ` ORDER BY 1, 2`
)

// Publish records in ferry_outbox_route the routes that the worker whose
// River client id is clientID delivers (replacing what it recorded
// before), deletes the routes of workers that stopped or were declared
// dead, and wakes every relay, so that messages waiting for one of these
// routes are relayed at once. A worker calls it at start, with its
// liveness lock held and before its River client fetches: the rows count
// for exactly as long as that lock is held (LiveRoutes).
func Publish(ctx context.Context, db Beginner, clientID string, routes *Routes) error {
	var topics, names, kinds, queues []string
	for _, r := range routes.All() {
		topics, names = append(topics, r.Topic), append(names, r.Name)
		kinds, queues = append(kinds, r.kind()), append(queues, QueueFor(r.Name))
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlPruneRoutes); err != nil {
			return fmt.Errorf("delete the routes of stopped and dead workers: %w", err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM ferry_outbox_route WHERE client_id = $1`, clientID); err != nil {
			return fmt.Errorf("delete this worker's routes: %w", err)
		}
		if len(names) > 0 {
			if _, err := tx.Exec(ctx, sqlPublishRoutes, clientID, topics, names, kinds, queues); err != nil {
				return fmt.Errorf("record routes: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, `SELECT pg_notify(ferry_outbox_channel(), '')`); err != nil {
			return fmt.Errorf("wake the relays: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: publish routes to ferry_outbox_route: %w", err)
	}
	return nil
}

// LiveRoutes returns, by topic, the names of the routes that live workers
// declare (Publish), sorted. A worker is live while its liveness lock is
// held, as internal/liveness judges it; a stopped, killed or partitioned
// worker's routes no longer count from the moment its session ends.
func LiveRoutes(ctx context.Context, q Querier) (map[string][]string, error) {
	rows, err := q.Query(ctx, sqlLiveRoutes)
	if err != nil {
		return nil, fmt.Errorf("outbox: read live routes: %w", err)
	}
	return collectRoutes(rows)
}

// collectRoutes reads the rows of sqlLiveRoutes (topic, route) into
// LiveRoutes's map.
func collectRoutes(rows pgx.Rows) (map[string][]string, error) {
	out := map[string][]string{}
	var topic, route string
	if _, err := pgx.ForEachRow(rows, []any{&topic, &route}, func() error {
		out[topic] = append(out[topic], route)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("outbox: read live routes: %w", err)
	}
	return out, nil
}

// union adds the routes of own (this process's) to live, by name, keeping
// each topic's names sorted and distinct.
func union(live map[string][]string, own *Routes) map[string][]string {
	if own == nil {
		return live
	}
	for _, r := range own.All() {
		if !slices.Contains(live[r.Topic], r.Name) {
			live[r.Topic] = append(live[r.Topic], r.Name)
			slices.Sort(live[r.Topic])
		}
	}
	return live
}
