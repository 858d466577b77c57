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
		// No recount runs while the counters start.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, RecountLockKey); err != nil {
			return err
		}
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

// RecountLockKey is the advisory lock (bigint form, held for a
// transaction) that one recount of the bounded queues holds, and that
// setting a first bound takes before it starts a queue's counters: two
// recounts never give back the same admissions twice, and a queue's
// counters never start again under a recount.
const RecountLockKey int64 = 911000005

// ErrRecountDeferred is what RecountQueues returns, as the cause of its
// error, when a transaction that writes river_job is still open after its
// wait, or is a prepared transaction: it changed nothing, and the next
// recount counts again.
var ErrRecountDeferred = errors.New("recount deferred")

// RecountQueues gives back, for each bounded queue, the admissions of
// transactions that rolled back after admitting jobs (a sequence does not
// roll back), and never more: a recount leaves every queue's length from
// its counters at or above its true length, and equal to it once the
// rolled-back admissions are given back. It takes no lock on river_job
// that a writer or a VACUUM waits for (see "Bounded queues" in the package
// doc for how it counts exactly all the same): it waits, up to wait, for
// the transactions writing river_job when it starts to end, and returns
// an error wrapping ErrRecountDeferred, having changed nothing, if they
// have not.
//
// It also keeps the counting triggers of river_job (migration 013) in step
// with the bounds: with no bounded queue it drops them once (an unbounded
// deployment pays nothing for bounds on insert; ACCESS EXCLUSIVE for a
// moment, with wait as its lock timeout), and with one it puts them back if
// they are missing, counting in the same transaction under LOCK TABLE
// river_job IN SHARE ROW EXCLUSIVE MODE (with wait as its lock timeout).
func RecountQueues(ctx context.Context, pool *pgxpool.Pool, wait time.Duration) error {
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
			if err := setLockTimeout(ctx, tx, wait); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `SELECT ferry_queue_disarm()`); err != nil {
				return fmt.Errorf("jobs: drop the queue triggers (no queue has a bound): %w", err)
			}
			return nil
		})
	}
	if !armed {
		return rearm(ctx, pool, wait)
	}
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := recount(ctx, tx, wait); err != nil {
			return fmt.Errorf("jobs: recount queues: %w", err)
		}
		return nil
	})
}

// recount gives back the rolled-back admissions of every bounded queue,
// in tx (READ COMMITTED, so that it holds no snapshot while it waits); the
// package doc ("Bounded queues") shows why what it gives back is never
// more than what rolled back.
func recount(ctx context.Context, tx pgx.Tx, wait time.Duration) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, RecountLockKey); err != nil {
		return err
	}
	// 1. Each queue's admitted sequence: a0. Every admission up to a0 was
	// taken by a transaction that writes river_job now, or has ended.
	var names []string
	var a0 []int64
	rows, err := tx.Query(ctx, `
		SELECT name, coalesce(pg_sequence_last_value(admitted), 0) FROM ferry_queue
		WHERE max_length IS NOT NULL AND admitted IS NOT NULL`)
	if err != nil {
		return err
	}
	var name string
	var a int64
	if _, err := pgx.ForEachRow(rows, []any{&name, &a}, func() error {
		names, a0 = append(names, name), append(a0, a)
		return nil
	}); err != nil {
		return err
	}
	// 2. Then the job id sequence (a job with a higher id was inserted,
	// and admitted, after a0 was read) and the transactions writing
	// river_job.
	var idMark int64
	var writers []string
	var prepared bool
	err = tx.QueryRow(ctx, `
		SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence('river_job', 'id')::regclass), 0),
			coalesce(array_agg(l.virtualtransaction) FILTER (WHERE l.pid IS NOT NULL AND l.pid <> pg_backend_pid()), '{}'),
			coalesce(bool_or(l.locktype IS NOT NULL AND l.pid IS NULL), false)
		FROM (SELECT 1) one
		LEFT JOIN pg_locks l ON l.locktype = 'relation' AND l.relation = 'river_job'::regclass
			AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
			AND l.mode = 'RowExclusiveLock' AND l.granted`).Scan(&idMark, &writers, &prepared)
	if err != nil {
		return err
	}
	if prepared {
		return fmt.Errorf("a prepared transaction writes river_job: %w", ErrRecountDeferred)
	}
	// 3. Wait for them to end, without holding anything they wait for.
	if err := waitForTransactions(ctx, tx, writers, wait); err != nil {
		return err
	}
	// 4. Every admission up to a0 is now committed or rolled back. In one
	// snapshot: what is left of a0 once the refunds, the releases, the
	// jobs in the counted states and those admitted since a0 are taken
	// out, rolled back, goes to the refunded sequence.
	_, err = tx.Exec(ctx, `
		WITH c AS (
			SELECT q.name, q.refunded, m.a0,
				coalesce((SELECT released FROM ferry_queue_released r WHERE r.name = q.name), 0) AS released,
				(SELECT count(*) FROM river_job j WHERE j.queue = q.name AND ferry_queue_counted(j.state)) AS counted,
				(SELECT count(*) FROM river_job j WHERE j.queue = q.name AND ferry_queue_counted(j.state) AND j.id > $3) AS since
			FROM unnest($1::text[], $2::bigint[]) AS m(name, a0)
			JOIN ferry_queue q ON q.name = m.name
			WHERE q.max_length IS NOT NULL AND q.admitted IS NOT NULL
		), g AS MATERIALIZED (
			SELECT refunded, a0 - coalesce(pg_sequence_last_value(refunded), 0) - released - counted + since AS back FROM c
		)
		SELECT setval(refunded, coalesce(pg_sequence_last_value(refunded), 0) + back, true) FROM g WHERE back > 0`,
		names, a0, idMark)
	return err
}

// waitForTransactions waits until none of the virtual transactions vxids
// is open, polling pg_locks, for up to wait.
func waitForTransactions(ctx context.Context, tx pgx.Tx, vxids []string, wait time.Duration) error {
	deadline := time.Now().Add(wait)
	pause := time.Millisecond
	for len(vxids) > 0 {
		err := tx.QueryRow(ctx, `
			SELECT coalesce(array_agg(virtualxid), '{}') FROM pg_locks
			WHERE locktype = 'virtualxid' AND virtualxid = ANY($1)`, vxids).Scan(&vxids)
		if err != nil {
			return err
		}
		if len(vxids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d transactions writing river_job still open after %s: %w", len(vxids), wait, ErrRecountDeferred)
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-t.C:
		}
		pause = min(2*pause, 50*time.Millisecond)
	}
	return nil
}

// rearm puts the counting triggers back on river_job, which went missing
// while a queue has a bound, and counts every bounded queue again in the
// same transaction, under LOCK TABLE river_job IN SHARE ROW EXCLUSIVE
// MODE (CREATE TRIGGER's lock, which keeps writers out while it counts).
func rearm(ctx context.Context, pool *pgxpool.Pool, lockTimeout time.Duration) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := setLockTimeout(ctx, tx, lockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, RecountLockKey); err != nil {
			return fmt.Errorf("jobs: recount queues: %w", err)
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

func setLockTimeout(ctx context.Context, tx pgx.Tx, d time.Duration) error {
	_, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", max(1, d.Milliseconds())))
	return err
}

// QueueRecounter is the leader runnable that calls RecountQueues every
// interval (waiting up to a second for the writers of river_job it waits
// for), logging a failure.
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
