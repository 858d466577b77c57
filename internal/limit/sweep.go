package limit

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/base/loop"
)

// seenEvery is how often a worker marks its limits seen in ferry_limit;
// goneAfter is how long after the last mark a limit counts as removed
// from every worker's config: its waiting jobs are woken and its slots
// dropped, and past forgetAfter its row is deleted.
const (
	seenEvery   = time.Minute
	goneAfter   = 10 * time.Minute
	forgetAfter = 24 * time.Hour
)

const (
	sqlRegister = `INSERT INTO ferry_limit AS l (name, kind, queue, key_field, concurrency, rate_count, rate_period, burst, seen_at)
SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::interval[], $8::int[]),
    now()
ON CONFLICT (name) DO UPDATE SET kind = excluded.kind, queue = excluded.queue, key_field = excluded.key_field,
    concurrency = excluded.concurrency, rate_count = excluded.rate_count, rate_period = excluded.rate_period,
    burst = excluded.burst, seen_at = now()`

	// sqlWaitingKeys lists the keys of concurrency limits ($1, with their
	// concurrencies $2) that have jobs waiting and a slot free: a slot
	// freed without a release (a killed worker's job, once rescued; a
	// waiting job deleted), for the sweep to hand on. It runs after
	// sqlDropStaleSlots, so it counts the slots as they are; one gone stale
	// since is found by the hand-over itself.
	sqlWaitingKeys = `SELECT w.limit_name, w.key
FROM (SELECT DISTINCT limit_name, key FROM ferry_limit_wait WHERE limit_name = ANY($1::text[])) AS w
JOIN unnest($1::text[], $2::int[]) AS c(name, n) ON c.name = w.limit_name
WHERE (SELECT count(*) FROM ferry_limit_slot s WHERE s.limit_name = w.limit_name AND s.key = w.key) < c.n`

	// sqlWakeReserved makes available the jobs that were handed a slot
	// before River wrote their snooze: those of $1, or all when $1 is NULL.
	sqlWakeReserved = `WITH woken AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    FROM ferry_limit_slot s
    WHERE s.job_id = j.id AND NOT s.started AND ($1::bigint[] IS NULL OR j.id = ANY($1::bigint[]))
      AND ` + snoozed + `
    RETURNING j.queue)
SELECT DISTINCT queue FROM woken`

	// sqlDropGoneWaits forgets the places of jobs that will not run
	// (finished, deleted) and of the limits removed from every config,
	// whose jobs are made available to run without them.
	sqlDropGoneWaits = `WITH gone AS (
    DELETE FROM ferry_limit_wait w
    WHERE NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = w.job_id
            AND j.state IN ('available', 'scheduled', 'running', 'retryable', 'pending'))
       OR NOT EXISTS (SELECT 1 FROM ferry_limit l WHERE l.name = w.limit_name
            AND l.seen_at > now() - make_interval(secs => $1))
    RETURNING w.job_id),
woken AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    FROM gone WHERE j.id = gone.job_id
      AND ` + snoozed + `
    RETURNING j.queue)
SELECT DISTINCT queue FROM woken`

	// sqlDropStaleSlots forgets the slots no job holds any more (a killed
	// worker's job, once rescued, of a key no job has asked for since).
	sqlDropStaleSlots = `DELETE FROM ferry_limit_slot s
WHERE NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = s.job_id AND ` + slotHeld + `)`

	sqlDropGoneSlots = `DELETE FROM ferry_limit_slot s
WHERE NOT EXISTS (SELECT 1 FROM ferry_limit l WHERE l.name = s.limit_name AND l.seen_at > now() - make_interval(secs => $1))`

	// sqlDropFullBuckets forgets the rate rows that say nothing: a bucket
	// whose tat has passed is full, as if it had no row.
	sqlDropFullBuckets = `DELETE FROM ferry_limit_rate r
WHERE r.tat < now() AND (r.queued_until IS NULL OR r.queued_until < now())
  AND NOT EXISTS (SELECT 1 FROM ferry_limit_wait w WHERE w.limit_name = r.limit_name AND w.key = r.key)`

	// sqlGhostQueues lists the rate keys whose queue end lies ahead with
	// nobody left in the queue (the jobs were deleted): a new job must not
	// wait behind them.
	sqlGhostQueues = `SELECT limit_name, key FROM ferry_limit_rate r WHERE queued_until > now()
  AND NOT EXISTS (SELECT 1 FROM ferry_limit_wait w WHERE w.limit_name = r.limit_name AND w.key = r.key)`

	sqlClearGhostQueue = `UPDATE ferry_limit_rate r SET queued_until = NULL
WHERE limit_name = $1 AND key = $2
  AND NOT EXISTS (SELECT 1 FROM ferry_limit_wait w WHERE w.limit_name = r.limit_name AND w.key = r.key)`

	sqlForget = `DELETE FROM ferry_limit WHERE seen_at < now() - make_interval(secs => $1)`
)

// Register writes the limits into ferry_limit (or marks them seen), where
// `enqueue limits` and the console read them and the sweep learns which
// limits some worker still enforces.
func (l *Limiter) Register(ctx context.Context) error {
	if len(l.limits) == 0 {
		return nil
	}
	n := len(l.limits)
	var (
		names, kinds, queues, fields = make([]string, n), make([]*string, n), make([]*string, n), make([]*string, n)
		conc, counts, bursts         = make([]*int32, n), make([]*int32, n), make([]*int32, n)
		periods                      = make([]*time.Duration, n)
	)
	opt := func(s string) *string {
		if s == "" {
			return nil
		}
		return &s
	}
	optInt := func(i int) *int32 {
		if i == 0 {
			return nil
		}
		v := int32(i)
		return &v
	}
	for i, lim := range l.limits {
		names[i], kinds[i], queues[i], fields[i] = lim.Name, opt(lim.Kind), opt(lim.Queue), opt(lim.KeyField)
		conc[i], counts[i], bursts[i] = optInt(lim.Concurrency), optInt(lim.Rate.Count), optInt(lim.Rate.Burst)
		if !lim.Rate.IsZero() {
			p := lim.Rate.Period
			periods[i] = &p
		}
	}
	if _, err := l.pool.Exec(ctx, sqlRegister, names, kinds, queues, fields, conc, counts, periods, bursts); err != nil {
		return fmt.Errorf("limits: register: %w", err)
	}
	return nil
}

// Run, on every worker until ctx ends, marks this worker's limits seen
// every minute, and follows River's snooze events (events, from the
// client's Subscribe(river.EventKindJobSnoozed)): a job of this process
// that was handed a slot while River had yet to write its snooze would
// sleep until its backstop; once the snooze is written, Run wakes it (in
// batches). The leader's sweep does the same for events that were
// dropped, a second later.
func (l *Limiter) Run(ctx context.Context, events <-chan *river.Event) error {
	if len(l.limits) == 0 {
		return nil
	}
	seen := time.NewTicker(seenEvery)
	defer seen.Stop()
	for {
		var ids []int64
		select {
		case <-ctx.Done():
			return nil
		case <-seen.C:
			if err := l.Register(ctx); err != nil && ctx.Err() == nil {
				l.logger.Warn("limits: cannot mark this worker's limits seen; retrying at the next interval", "error", err)
			}
			l.forgetParked(time.Now().Add(-l.backstop))
			continue
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			ids = l.parkedSnoozed(ids, ev)
		}
		for more := true; more; {
			select {
			case ev, ok := <-events:
				if !ok {
					events, more = nil, false
					break
				}
				ids = l.parkedSnoozed(ids, ev)
			default:
				more = false
			}
		}
		if len(ids) > 0 {
			if err := l.wake(ctx, ids); err != nil && ctx.Err() == nil {
				l.logger.Warn("limits: cannot wake jobs handed a slot; the sweep will", "error", err)
			}
		}
	}
}

// parkedSnoozed adds ev's job to ids if it is parked here.
func (l *Limiter) parkedSnoozed(ids []int64, ev *river.Event) []int64 {
	if ev == nil || ev.Job == nil {
		return ids
	}
	if _, ok := l.parked.LoadAndDelete(ev.Job.ID); ok {
		ids = append(ids, ev.Job.ID)
	}
	return ids
}

// forgetParked drops the parked jobs whose snooze event never came (River
// drops events when its buffer is full).
func (l *Limiter) forgetParked(before time.Time) {
	l.parked.Range(func(k, v any) bool {
		if v.(time.Time).Before(before) {
			l.parked.Delete(k)
		}
		return true
	})
}

// wake makes available those of ids that were handed a slot.
func (l *Limiter) wake(ctx context.Context, ids []int64) error {
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, sqlWakeReserved, ids)
		if err != nil {
			return err
		}
		queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		return l.notify(ctx, tx, queues)
	})
}

// Sweeper returns the leader's runnable: a Sweep now and every
// SweepInterval (a failed pass ends it, and the elector runs it again
// after a backoff).
func (l *Limiter) Sweeper() func(context.Context) error {
	return func(ctx context.Context) error { return loop.Every(ctx, l.sweep, l.Sweep) }
}

// Sweep is one pass of what no job's own start or end does: it hands the
// slots freed without a release (a killed worker's jobs, once rescued; a
// waiting job deleted) to waiting jobs, wakes the jobs handed a slot
// before River wrote their snooze, forgets the places of jobs that will
// not run and the limits that no worker enforces any more (their jobs run
// at once), and drops the rate rows that say nothing. Each step is a short
// statement or a transaction per key under that key's lock.
func (l *Limiter) Sweep(ctx context.Context) error {
	gone := goneAfter.Seconds()
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		var queues []string
		for _, step := range []struct {
			what string
			sql  string
			args []any
		}{
			{"wake jobs handed a slot", sqlWakeReserved, []any{nil}},
			{"drop the places of gone jobs and limits", sqlDropGoneWaits, []any{gone}},
		} {
			rows, err := tx.Query(ctx, step.sql, step.args...)
			if err != nil {
				return fmt.Errorf("%s: %w", step.what, err)
			}
			qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return fmt.Errorf("%s: %w", step.what, err)
			}
			queues = append(queues, qs...)
		}
		return l.notify(ctx, tx, queues)
	})
	if err != nil {
		return err
	}
	for _, step := range []struct {
		what string
		sql  string
		args []any
	}{
		{"drop the slots of gone limits", sqlDropGoneSlots, []any{gone}},
		{"drop stale slots", sqlDropStaleSlots, nil},
		{"drop full buckets", sqlDropFullBuckets, nil},
		{"forget old limits", sqlForget, []any{forgetAfter.Seconds()}},
	} {
		if _, err := l.pool.Exec(ctx, step.sql, step.args...); err != nil {
			return fmt.Errorf("%s: %w", step.what, err)
		}
	}

	// Free slots to the waiting, key by key under each key's lock.
	byName := map[string]*Limit{}
	var (
		concurrent []string
		capacity   []int32
	)
	for i := range l.limits {
		lim := &l.limits[i]
		byName[lim.Name] = lim
		if lim.Concurrency > 0 {
			concurrent, capacity = append(concurrent, lim.Name), append(capacity, int32(lim.Concurrency))
		}
	}
	keys, err := l.keys(ctx, sqlWaitingKeys, concurrent, capacity)
	if err != nil {
		return fmt.Errorf("list waiting keys: %w", err)
	}
	for _, k := range keys {
		t := target{lim: byName[k[0]], key: k[1]}
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlLock, []string{t.lockName()}); err != nil {
				return err
			}
			queues, err := l.handOver(ctx, tx, t, []int64{}, []int32{})
			if err != nil {
				return err
			}
			return l.notify(ctx, tx, queues)
		})
		if err != nil {
			return fmt.Errorf("hand over %s %q: %w", t.lim.Name, t.key, err)
		}
	}

	ghosts, err := l.keys(ctx, sqlGhostQueues)
	if err != nil {
		return fmt.Errorf("list ghost queues: %w", err)
	}
	for _, k := range ghosts {
		lim := byName[k[0]]
		if lim == nil {
			continue
		}
		t := target{lim: lim, key: k[1]}
		err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, sqlLock, []string{t.lockName()}); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, sqlClearGhostQueue, t.lim.Name, t.key)
			return err
		})
		if err != nil {
			return fmt.Errorf("clear the queue of %s %q: %w", t.lim.Name, t.key, err)
		}
	}
	return nil
}

func (l *Limiter) keys(ctx context.Context, sql string, args ...any) ([][2]string, error) {
	rows, err := l.pool.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) ([2]string, error) {
		var k [2]string
		err := row.Scan(&k[0], &k[1])
		return k, err
	})
}
