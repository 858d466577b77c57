package jobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

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
// the bound, and the change is returned (and logged by the worker). A
// bound that does not change costs one upsert; one that does is set in a
// transaction that takes LOCK TABLE river_job IN SHARE MODE, which waits
// out every transaction writing river_job and holds new writers back until
// it commits, so that the queue's length is counted exactly when it is
// first bounded.
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
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return nil, err
	}
	if err == nil && sameBound(current, want) {
		_, err := pool.Exec(ctx, `UPDATE ferry_queue SET workers = coalesce($2, workers), updated_at = now() WHERE name = $1`, b.Name, workers)
		return nil, err
	}
	var change *BoundChange
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE river_job IN SHARE MODE`); err != nil {
			return err
		}
		var before *int64
		err := tx.QueryRow(ctx, `SELECT max_length FROM ferry_queue WHERE name = $1 FOR UPDATE`, b.Name).Scan(&before)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err == nil && sameBound(before, want) {
			_, err := tx.Exec(ctx, `UPDATE ferry_queue SET workers = coalesce($2, workers), updated_at = now() WHERE name = $1`, b.Name, workers)
			return err
		}
		// A queue that was bounded has exact counters (every writer of
		// river_job kept them under the bound); one that was not gets them
		// counted now, while no writer runs.
		if before == nil {
			if _, err := tx.Exec(ctx, `
				INSERT INTO ferry_queue_released (name, released) VALUES ($1, 0)
				ON CONFLICT (name) DO UPDATE SET released = 0`, b.Name); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `
				INSERT INTO ferry_queue (name, max_length, workers, admitted)
				VALUES ($1, $2, $3, (SELECT count(*) FROM river_job WHERE queue = $1 AND ferry_queue_counted(state)))
				ON CONFLICT (name) DO UPDATE SET max_length = excluded.max_length,
					workers = coalesce(excluded.workers, ferry_queue.workers),
					admitted = excluded.admitted, updated_at = now()`, b.Name, want, workers); err != nil {
				return err
			}
		} else if _, err := tx.Exec(ctx, `
				UPDATE ferry_queue SET max_length = $2, workers = coalesce($3, workers), updated_at = now()
				WHERE name = $1`, b.Name, want, workers); err != nil {
			return err
		}
		change = &BoundChange{Queue: b.Name, From: derefBound(before), To: b.MaxLength}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return change, nil
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
