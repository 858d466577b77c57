package jobs

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrQueueFull is what an insert into a queue at its bound returns, as a
// *QueueFullError (errors.Is(err, ErrQueueFull)). Nothing of the refused
// statement was inserted.
var ErrQueueFull = errors.New("queue full")

// ErrCodeQueueFull is the SQLSTATE with which the database refuses a
// statement that would put a bounded queue over its bound (migration 010).
const ErrCodeQueueFull = "FR002"

// QueueFullError is an insert refused because its queue is at its bound.
type QueueFullError struct {
	// Queue is the queue's name.
	Queue string
	// MaxLength is the queue's bound.
	MaxLength int64
	// Length is the number of jobs the queue held (at most) when the insert
	// was refused.
	Length int64
	// Adding is the number of jobs the refused statement added to the queue.
	Adding int64
	// Err is the database's error.
	Err error
}

func (e *QueueFullError) Error() string {
	return fmt.Sprintf("queue full: queue %q holds %d of at most %d jobs (max_length); %d more do not fit", e.Queue, e.Length, e.MaxLength, e.Adding)
}

// Is makes errors.Is(err, ErrQueueFull) true.
func (e *QueueFullError) Is(target error) bool { return target == ErrQueueFull }

// Unwrap returns the database's error.
func (e *QueueFullError) Unwrap() error { return e.Err }

// AsQueueFull returns err translated into a *QueueFullError when the database
// refused it as a queue over its bound (SQLSTATE ErrCodeQueueFull, however
// deeply River wrapped it), and err as it is otherwise. Every insert path
// ferry builds passes its errors through it.
func AsQueueFull(err error) error {
	var qf *QueueFullError
	if err == nil || errors.As(err, &qf) {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != ErrCodeQueueFull {
		return err
	}
	var d struct {
		Queue     string `json:"queue"`
		MaxLength int64  `json:"max_length"`
		Length    int64  `json:"length"`
		Adding    int64  `json:"adding"`
	}
	_ = json.Unmarshal([]byte(pgErr.Detail), &d)
	return &QueueFullError{Queue: d.Queue, MaxLength: d.MaxLength, Length: d.Length, Adding: d.Adding, Err: pgErr}
}

// QueueBound is the bound and the worker count one process gives a queue.
type QueueBound struct {
	Name string
	// MaxLength is the queue's bound; 0 leaves it unbounded.
	MaxLength int64
	// Workers is the process's worker count for the queue, shown by
	// `enqueue queues`; 0 when it does not work the queue.
	Workers int
}

// BoundChange is what SetQueueBounds did to one queue's bound.
type BoundChange struct {
	Queue string
	// From and To are the bounds before and after; 0 is unbounded.
	From, To int64
}

// SetQueueBounds records each queue's bound and worker count in
// ferry_queue, as a worker does at start from its configuration. The last
// writer wins: a worker started with another bound for a queue replaces
// the bound, and the change is returned (and logged by the worker). An
// unbounded queue, a bound that does not change, and a change of a bound
// that exists cost an upsert. A bound set on a queue that had none is set in
// a transaction that takes LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE
// (and puts the counting triggers on river_job if they are not), which waits
// out every transaction writing river_job and holds new writers back until
// it commits, so that the queue's length is counted exactly.
func SetQueueBounds(ctx context.Context, pool *pgxpool.Pool, bounds []QueueBound) ([]BoundChange, error) {
	var changes []BoundChange
	for _, b := range bounds {
		ch, err := setQueueBound(ctx, pool, b)
		if err != nil {
			return changes, fmt.Errorf("jobs: set the bound of queue %q: %w", b.Name, err)
		}
		if ch != nil {
			changes = append(changes, *ch)
		}
	}
	return changes, nil
}

func setQueueBound(ctx context.Context, pool *pgxpool.Pool, b QueueBound) (*BoundChange, error) {
	want := nullBound(b.MaxLength)
	var workers *int
	if b.Workers > 0 {
		workers = &b.Workers
	}
	var current *int64
	err := pool.QueryRow(ctx, `SELECT max_length FROM ferry_queue WHERE name = $1`, b.Name).Scan(&current)
	exists := err == nil
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	// No bound, or a bound that stays, or one that changes on a queue that
	// already has one (its counters are exact): no lock on river_job.
	if want == nil || current != nil {
		if exists && sameBound(current, want) {
			_, err := pool.Exec(ctx, `UPDATE ferry_queue SET workers = coalesce($2, workers), updated_at = now() WHERE name = $1`, b.Name, workers)
			return nil, err
		}
		tag, err := pool.Exec(ctx, `
			INSERT INTO ferry_queue (name, max_length, workers) VALUES ($1, $2, $3)
			ON CONFLICT (name) DO UPDATE SET max_length = excluded.max_length,
				workers = coalesce(excluded.workers, ferry_queue.workers), updated_at = now()
			WHERE (ferry_queue.max_length IS NULL) = (excluded.max_length IS NULL)`, b.Name, want, workers)
		if err != nil {
			return nil, err
		}
		if tag.RowsAffected() == 1 {
			if !exists {
				return nil, nil // a new unbounded queue
			}
			return &BoundChange{Queue: b.Name, From: derefBound(current), To: b.MaxLength}, nil
		}
		if want == nil {
			// Bounded meanwhile by another worker: unbound it.
			_, err := pool.Exec(ctx, `UPDATE ferry_queue SET max_length = NULL, workers = coalesce($2, workers), updated_at = now() WHERE name = $1`, b.Name, workers)
			return &BoundChange{Queue: b.Name, To: 0}, err
		}
		// Unbounded meanwhile: count it, below.
	}
	var change *BoundChange
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// SHARE ROW EXCLUSIVE: writers wait, and so does another worker
		// bounding a queue (it cannot then take the lock of CREATE TRIGGER
		// while this one waits for it, a deadlock).
		if _, err := tx.Exec(ctx, `LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return err
		}
		var before *int64
		err := tx.QueryRow(ctx, `SELECT max_length FROM ferry_queue WHERE name = $1 FOR UPDATE`, b.Name).Scan(&before)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if before != nil {
			// Bounded meanwhile by another worker: its counters are exact.
			if _, err := tx.Exec(ctx, `UPDATE ferry_queue SET max_length = $2, workers = coalesce($3, workers), updated_at = now() WHERE name = $1`, b.Name, want, workers); err != nil {
				return err
			}
		} else {
			// The queue's counters start from its jobs now, while no
			// writer of river_job runs.
			if err := startCounters(ctx, tx, b.Name, want, workers); err != nil {
				return err
			}
		}
		if !sameBound(before, want) {
			change = &BoundChange{Queue: b.Name, From: derefBound(before), To: b.MaxLength}
		}
		// The counting triggers, if no queue had a bound: from the commit,
		// every writer of river_job counts, from the counters set above.
		_, err = tx.Exec(ctx, `SELECT ferry_queue_arm()`)
		return err
	})
	if err != nil {
		return nil, err
	}
	return change, nil
}

// startCounters makes the queue's sequences (admitted, refunded) if it has
// none, sets them from its jobs in the counted states, and records its
// bound; tx holds LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE. setval is not
// transactional: if tx rolls back, the queue stays unbounded and the
// values are unused until the next start.
func startCounters(ctx context.Context, tx pgx.Tx, name string, maxLength *int64, workers *int) error {
	sum := sha256.Sum256([]byte(name))
	h := hex.EncodeToString(sum[:8])
	admitted, refunded := "ferry_queue_admitted_"+h, "ferry_queue_refunded_"+h
	for _, seq := range []string{admitted, refunded} {
		if _, err := tx.Exec(ctx, "CREATE SEQUENCE IF NOT EXISTS "+pgx.Identifier{seq}.Sanitize()+" MINVALUE 0"); err != nil {
			return err
		}
	}
	if _, err := tx.Exec(ctx, `
		INSERT INTO ferry_queue_released (name, released) VALUES ($1, 0)
		ON CONFLICT (name) DO UPDATE SET released = 0`, name); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `
		SELECT setval($2::regclass, (SELECT count(*) FROM river_job WHERE queue = $1 AND ferry_queue_counted(state)), true),
			setval($3::regclass, 0, true)`, name, admitted, refunded); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO ferry_queue (name, max_length, workers, admitted, refunded)
		VALUES ($1, $2, $3, $4::regclass, $5::regclass)
		ON CONFLICT (name) DO UPDATE SET max_length = excluded.max_length,
			workers = coalesce(excluded.workers, ferry_queue.workers),
			admitted = excluded.admitted, refunded = excluded.refunded, updated_at = now()`,
		name, maxLength, workers, admitted, refunded)
	return err
}

// RecountQueues sets each bounded queue's admitted counter from its jobs,
// giving back the admissions of transactions that rolled back after
// admitting jobs (a sequence does not roll back). It takes LOCK TABLE
// river_job IN SHARE ROW EXCLUSIVE MODE, which waits for the transactions writing
// river_job and holds new writers back while the queues are counted, with
// lockTimeout: when the lock is not had in time, it returns the error and
// changes nothing. With no bounded queue it takes no lock, unless it has
// triggers to drop.
//
// It also keeps the counting triggers of river_job (migration 013) in step
// with the bounds: with no bounded queue it drops them once (an unbounded
// deployment pays nothing for bounds on insert), and with one it puts them
// back if they are missing, counting in the same transaction.
func RecountQueues(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration) error {
	var bounded, armed bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ferry_queue WHERE max_length IS NOT NULL AND admitted IS NOT NULL), ferry_queue_armed()`).Scan(&bounded, &armed)
	if err != nil {
		return err
	}
	if !bounded {
		if !armed {
			return nil
		}
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(1, lockTimeout.Milliseconds()))); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT ferry_queue_disarm()`); err != nil {
				return fmt.Errorf("jobs: drop the queue triggers (no queue has a bound): %w", err)
			}
			return nil
		})
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(1, lockTimeout.Milliseconds()))); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("jobs: recount queues: %w", err)
		}
		if _, err := tx.Exec(ctx, `SELECT ferry_queue_arm()`); err != nil {
			return fmt.Errorf("jobs: recount queues: %w", err)
		}
		// No writer runs: refunded and released are stable, and every
		// job in a counted state is committed.
		_, err := tx.Exec(ctx, `
			SELECT setval(q.admitted,
				(SELECT count(*) FROM river_job j WHERE j.queue = q.name AND ferry_queue_counted(j.state))
				+ coalesce(pg_sequence_last_value(q.refunded), 0)
				+ coalesce((SELECT released FROM ferry_queue_released r WHERE r.name = q.name), 0), true)
			FROM ferry_queue q WHERE q.max_length IS NOT NULL AND q.admitted IS NOT NULL`)
		if err != nil {
			return fmt.Errorf("jobs: recount queues: %w", err)
		}
		return nil
	})
}

// QueueRecounter is the leader runnable that calls RecountQueues every
// interval (with a lock timeout of a second), logging a failure.
func QueueRecounter(pool *pgxpool.Pool, every time.Duration, logger *slog.Logger) func(context.Context) error {
	return func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
			if err := RecountQueues(ctx, pool, time.Second); err != nil && ctx.Err() == nil {
				logger.Warn("queues: recount failed; retrying at the next interval", "error", err, "retry_in", every)
			}
		}
	}
}

// LogBoundChanges logs each change as `queues: bound changed`.
func LogBoundChanges(logger *slog.Logger, changes []BoundChange) {
	for _, c := range changes {
		logger.Info("queues: bound changed", "queue", c.Queue, "from", c.From, "to", c.To)
	}
}

func nullBound(n int64) *int64 {
	if n <= 0 {
		return nil
	}
	return &n
}

func derefBound(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func sameBound(a, b *int64) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}

// QueueInfo is one queue as `enqueue queues` lists it.
type QueueInfo struct {
	Name string `json:"queue"`
	// Counts are the queue's jobs in each counted state (available,
	// scheduled, retryable, pending, running), zeros included.
	Counts map[string]int64 `json:"counts"`
	// Length is the sum of Counts: what the bound limits.
	Length int64 `json:"length"`
	// MaxLength is the queue's bound; nil when it has none.
	MaxLength *int64 `json:"max_length"`
	// Workers is the worker count the last worker started with the queue
	// recorded; nil when no worker has recorded it.
	Workers *int `json:"workers"`
}

// CountedStates are the job states a queue's bound counts.
var CountedStates = []string{"available", "scheduled", "retryable", "pending", "running"}

// ListQueues returns every queue that has jobs in a counted state, a row in
// ferry_queue or a River client working it, by name.
func ListQueues(ctx context.Context, db DBTX) ([]QueueInfo, error) {
	rows, err := db.Query(ctx, `
		WITH counts AS (
			SELECT queue, state::text AS state, count(*) AS n FROM river_job
			WHERE ferry_queue_counted(state) GROUP BY queue, state
		), names AS (
			SELECT name FROM ferry_queue UNION SELECT queue FROM counts UNION SELECT name FROM river_queue
		)
		SELECT n.name, q.max_length, q.workers,
			coalesce(jsonb_object_agg(c.state, c.n) FILTER (WHERE c.state IS NOT NULL), '{}')
		FROM names n
		LEFT JOIN ferry_queue q ON q.name = n.name
		LEFT JOIN counts c ON c.queue = n.name
		GROUP BY n.name, q.max_length, q.workers
		ORDER BY n.name`)
	if err != nil {
		return nil, fmt.Errorf("jobs: list queues: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (QueueInfo, error) {
		var q QueueInfo
		if err := row.Scan(&q.Name, &q.MaxLength, &q.Workers, &q.Counts); err != nil {
			return q, err
		}
		for _, s := range CountedStates {
			if _, ok := q.Counts[s]; !ok {
				q.Counts[s] = 0
			}
			q.Length += q.Counts[s]
		}
		return q, nil
	})
	if err != nil {
		return nil, fmt.Errorf("jobs: list queues: %w", err)
	}
	return out, nil
}

// QueueLength is a bounded queue's length as its bound counts it.
type QueueLength struct {
	Queue  string
	Length int64
}

// QueueLengths returns the length of every bounded queue from its
// counters (admitted - refunded - released), which costs no count of
// river_job. It includes the jobs of transactions still in flight.
func QueueLengths(ctx context.Context, db DBTX) ([]QueueLength, error) {
	rows, err := db.Query(ctx, `SELECT q.name, ferry_queue_length(q) FROM ferry_queue q
		WHERE q.max_length IS NOT NULL AND q.admitted IS NOT NULL ORDER BY q.name`)
	if err != nil {
		return nil, fmt.Errorf("jobs: queue lengths: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[QueueLength])
	if err != nil {
		return nil, fmt.Errorf("jobs: queue lengths: %w", err)
	}
	return out, nil
}
