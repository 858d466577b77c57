package limit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Defaults of Config.
const (
	// DefaultBackstop is how long a job waiting for a slot sleeps when
	// nothing wakes it: a lost wake-up costs at most this much.
	DefaultBackstop = time.Minute
	// DefaultLead is how early a job waiting for a rate is made due, so that
	// a fetch (one poll interval) has brought it to a worker when its turn
	// comes; there it waits out the rest in process.
	DefaultLead = 100 * time.Millisecond
	// DefaultSweepInterval is how often the leader's sweep gives free slots
	// to waiting jobs and drops what finished jobs left behind.
	DefaultSweepInterval = time.Second
)

// maxSpin is the longest a job whose rate turn is near waits in process
// (holding its worker) rather than going back to the queue.
const maxSpin = 250 * time.Millisecond

// retryAfterError is how long a job whose limits could not be read (the
// database is unreachable) waits before it tries again. Its attempt is
// given back: a limit's trouble is not the job's failure.
const retryAfterError = time.Second

// Config configures a Limiter.
type Config struct {
	Pool   *pgxpool.Pool
	Limits []Limit
	// Schema is River's schema (its insert notifications are named after
	// it); "" for the search_path's.
	Schema string
	// Lead: see DefaultLead. Set it to the workers' fetch poll interval.
	Lead time.Duration
	// Backstop: see DefaultBackstop.
	Backstop time.Duration
	// SweepInterval: see DefaultSweepInterval.
	SweepInterval time.Duration
	Logger        *slog.Logger
}

// Limiter enforces limits on the jobs of one River client: install its
// Middleware on the client, run Run on every worker and Sweep on the
// leader.
type Limiter struct {
	pool     *pgxpool.Pool
	limits   []Limit
	byKind   map[string][]*Limit
	byQueue  map[string][]*Limit
	schema   string
	lead     time.Duration
	backstop time.Duration
	sweep    time.Duration
	logger   *slog.Logger

	// parked holds the jobs of this process that wait for a slot, from
	// their decision to wait until River has written their snooze (Run),
	// with the time they were parked.
	parked sync.Map
}

// New checks the limits (names unique, each entry whole) and returns a
// Limiter. Limits without a name get DefaultName.
func New(cfg Config) (*Limiter, error) {
	l := &Limiter{
		pool: cfg.Pool, schema: cfg.Schema,
		byKind: map[string][]*Limit{}, byQueue: map[string][]*Limit{},
		lead:     cmp.Or(cfg.Lead, DefaultLead),
		backstop: cmp.Or(cfg.Backstop, DefaultBackstop),
		sweep:    cmp.Or(cfg.SweepInterval, DefaultSweepInterval),
		logger:   cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
	}
	seen := map[string]bool{}
	for _, lim := range cfg.Limits {
		lim.Name = cmp.Or(lim.Name, DefaultName(lim))
		if field, err := lim.Check(); err != nil {
			return nil, fmt.Errorf("limit %q: %s: %w", lim.Name, field, err)
		}
		if seen[lim.Name] {
			return nil, fmt.Errorf("limit %q: name: given twice", lim.Name)
		}
		seen[lim.Name] = true
		l.limits = append(l.limits, lim)
	}
	for i := range l.limits {
		lim := &l.limits[i]
		if lim.Kind != "" {
			l.byKind[lim.Kind] = append(l.byKind[lim.Kind], lim)
		} else {
			l.byQueue[lim.Queue] = append(l.byQueue[lim.Queue], lim)
		}
	}
	return l, nil
}

// Limits returns the limits, with their names.
func (l *Limiter) Limits() []Limit { return slices.Clone(l.limits) }

// target is one limit as it applies to one job: the limit and the job's key.
type target struct {
	lim *Limit
	key string
}

// lockName names the target's advisory lock: a space never occurs in a
// limit's name, so no two targets share one.
func (t target) lockName() string { return "ferry.limit " + t.lim.Name + " " + t.key }

// targets returns the limits that apply to job, ordered by lock name (the
// order their locks are taken in, so that two jobs never deadlock).
func (l *Limiter) targets(job *rivertype.JobRow) []target {
	var out []target
	for _, lims := range [][]*Limit{l.byKind[job.Kind], l.byQueue[job.Queue]} {
		for _, lim := range lims {
			t := target{lim: lim}
			if lim.KeyField != "" {
				t.key = KeyOf(job.EncodedArgs, lim.KeyField)
			}
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b target) int { return cmp.Compare(a.lockName(), b.lockName()) })
	return out
}

// Middleware returns the River worker middleware that holds each limited
// job until its limits let it start. Install it outside the middleware
// that should not see a waiting job (metrics, traces).
func (l *Limiter) Middleware() rivertype.Middleware { return &middleware{l: l} }

type middleware struct {
	river.MiddlewareDefaults
	l *Limiter
}

var _ rivertype.WorkerMiddleware = (*middleware)(nil)

func (m *middleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	ts := m.l.targets(job)
	if len(ts) == 0 {
		return doInner(ctx)
	}
	for {
		out, err := m.l.acquire(ctx, job.ID, job.Attempt, ts)
		switch {
		case err != nil && ctx.Err() != nil:
			// Shutting down: the job is available again at once, its
			// attempt given back.
			return river.JobSnooze(0)
		case err != nil:
			m.l.logger.Warn("limits: cannot read the job's limits; it waits and tries again",
				"job_id", job.ID, "kind", job.Kind, "error", err)
			return river.JobSnooze(retryAfterError)
		case out.start:
			defer m.l.release(ctx, job.ID, job.Attempt, ts)
			return doInner(ctx)
		case out.sleep > 0:
			t := time.NewTimer(out.sleep)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return river.JobSnooze(0)
			}
		default:
			if out.parked {
				m.l.parked.Store(job.ID, time.Now())
			}
			return river.JobSnooze(out.snooze)
		}
	}
}

// outcome is what acquire decided: start now, try again after sleep (a
// rate's turn is near), or wait (snooze) in the limit's queue.
type outcome struct {
	start  bool
	sleep  time.Duration
	snooze time.Duration
	parked bool // waits for a slot: woken by a hand-over
}

// slotHeld is when the slot s of job j is held: a started slot while the
// job runs at the slot's attempt (a killed worker's job until ferry's
// rescue settles it; a rescued job's next attempt takes a slot of its
// own, so that the late release of a worker declared dead frees nothing
// but its own), a slot handed to a waiting job while the job waits to be
// fetched or starts.
const slotHeld = `(CASE WHEN s.started THEN j.state = 'running' AND j.attempt = s.attempt
    ELSE j.state IN ('available', 'scheduled', 'running') END)`

// snoozed is when the job j waits, snoozed by River: scheduled, or
// available later (a snooze shorter than River's scheduler interval). A
// wake-up makes it available now.
const snoozed = `(j.state = 'scheduled' OR (j.state = 'available' AND j.scheduled_at > now()))`

const (
	sqlLock = `SELECT count(pg_advisory_xact_lock(hashtextextended(n, 0))) FROM unnest($1::text[]) AS n`

	// sqlSlots drops the target's stale slots (held by a job that no longer
	// runs, or handed to one that no longer waits to run) and reads how
	// many slots others hold, whether the job holds one, and how many jobs
	// wait. A slot held by a job that runs stays held until the job stops
	// running: a killed worker's jobs hold theirs until ferry's rescue
	// settles them.
	sqlSlots = `WITH stale AS (
    DELETE FROM ferry_limit_slot s
    WHERE s.limit_name = $1 AND s.key = $2 AND s.job_id <> $3
      AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = s.job_id AND ` + slotHeld + `)
    RETURNING 1)
SELECT (SELECT count(*) FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id <> $3)
         - (SELECT count(*) FROM stale),
       EXISTS (SELECT 1 FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id = $3
           AND (NOT started OR attempt = $4))`

	// sqlRate reads the target's rate state, the job's place in its queue
	// and the database's clock (every replica measures against one clock).
	sqlRate = `SELECT r.tat, r.queued_until, w.job_id IS NOT NULL, w.due, clock_timestamp()
FROM (SELECT 1) AS one
LEFT JOIN ferry_limit_rate r ON r.limit_name = $1 AND r.key = $2
LEFT JOIN ferry_limit_wait w ON w.limit_name = $1 AND w.key = $2 AND w.job_id = $3`

	sqlTakeSlot = `INSERT INTO ferry_limit_slot (limit_name, key, job_id, attempt, started) VALUES ($1, $2, $3, $4, true)
ON CONFLICT (limit_name, key, job_id) DO UPDATE SET started = true, attempt = excluded.attempt, taken_at = now()`

	sqlTakeToken = `INSERT INTO ferry_limit_rate (limit_name, key, tat) VALUES ($1, $2, $3)
ON CONFLICT (limit_name, key) DO UPDATE SET tat = excluded.tat`

	sqlQueueRate = `INSERT INTO ferry_limit_rate (limit_name, key, tat, queued_until) VALUES ($1, $2, $3, $4)
ON CONFLICT (limit_name, key) DO UPDATE SET queued_until = greatest(ferry_limit_rate.queued_until, excluded.queued_until)`

	sqlWait = `INSERT INTO ferry_limit_wait (limit_name, key, job_id, due) VALUES ($1, $2, $3, $4)
ON CONFLICT (limit_name, key, job_id) DO UPDATE SET due = excluded.due`

	sqlUnwaitAll = `DELETE FROM ferry_limit_wait WHERE job_id = $1`

	sqlUnwaitOthers = `DELETE FROM ferry_limit_wait WHERE job_id = $1 AND (limit_name, key) <> ($2, $3)`

	// sqlHandOver gives the target's free slots to the jobs that wait
	// longest: each gets a slot reserved in its name and is made available
	// now. $3 is a job whose slot is given up (0 for none) at attempt $5,
	// $4 the concurrency. A waiting job whose snooze River has not written yet
	// (still running) keeps its reserved slot; the sweep wakes it once the
	// snooze is written. It returns the queues of the jobs woken.
	sqlHandOver = `WITH mine AS (
    DELETE FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id = $3
        AND (NOT started OR attempt = $5)),
stale AS (
    DELETE FROM ferry_limit_slot s
    WHERE s.limit_name = $1 AND s.key = $2 AND s.job_id <> $3
      AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = s.job_id AND ` + slotHeld + `)
    RETURNING 1),
free AS (
    SELECT $4 - (SELECT count(*) FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id <> $3)
              + (SELECT count(*) FROM stale) AS n),
next AS (
    SELECT job_id FROM ferry_limit_wait WHERE limit_name = $1 AND key = $2 AND job_id <> $3
    ORDER BY since, job_id LIMIT (SELECT greatest(n, 0) FROM free)),
handed AS (
    DELETE FROM ferry_limit_wait w USING next
    WHERE w.limit_name = $1 AND w.key = $2 AND w.job_id = next.job_id
    RETURNING w.job_id),
reserved AS (
    INSERT INTO ferry_limit_slot (limit_name, key, job_id, started)
    SELECT $1, $2, job_id, false FROM handed
    ON CONFLICT (limit_name, key, job_id) DO NOTHING),
woken AS (
    UPDATE river_job j SET state = 'available', scheduled_at = now()
    FROM handed WHERE j.id = handed.job_id
      AND ` + snoozed + `
    RETURNING j.queue)
SELECT DISTINCT queue FROM woken`
)

type slotState struct {
	held int
	mine bool
}

type rateState struct {
	tat, queuedUntil *time.Time
	waiter           bool
	due              *time.Time
	now              time.Time
}

// acquire decides, under the targets' locks, whether job starts now. A
// start takes every target at once (a slot, a token) or none; a wait
// queues the job on the first target that refuses it, and gives back any
// slot it had been handed by the others.
func (l *Limiter) acquire(ctx context.Context, jobID int64, attempt int, ts []target) (out outcome, err error) {
	err = pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		out = outcome{}
		names := make([]string, len(ts))
		for i, t := range ts {
			names[i] = t.lockName()
		}
		b := &pgx.Batch{}
		b.Queue(sqlLock, names)
		slots := make([]slotState, len(ts))
		rates := make([]rateState, len(ts))
		for i, t := range ts {
			if t.lim.Concurrency > 0 {
				b.Queue(sqlSlots, t.lim.Name, t.key, jobID, attempt).QueryRow(func(row pgx.Row) error {
					return row.Scan(&slots[i].held, &slots[i].mine)
				})
			}
			if !t.lim.Rate.IsZero() {
				b.Queue(sqlRate, t.lim.Name, t.key, jobID).QueryRow(func(row pgx.Row) error {
					r := &rates[i]
					return row.Scan(&r.tat, &r.queuedUntil, &r.waiter, &r.due, &r.now)
				})
			}
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}

		// The first target that refuses the job, and what it says.
		for i, t := range ts {
			if t.lim.Concurrency > 0 && !slots[i].mine && slots[i].held >= t.lim.Concurrency {
				out.snooze, out.parked = l.backstop, true
				return l.wait(ctx, tx, jobID, attempt, ts, slots, i, nil, time.Time{})
			}
			if r := rates[i]; !t.lim.Rate.IsZero() {
				allowed := r.now
				if r.tat != nil {
					allowed = r.tat.Add(-t.lim.Rate.tolerance())
				}
				queued := !r.waiter && r.queuedUntil != nil && r.queuedUntil.After(r.now)
				if !queued && !r.now.Before(allowed) {
					continue
				}
				// Its turn: when the rate allows the next start, behind the
				// jobs queued before it. Near, it waits in process; further,
				// it is snoozed until a fetch brings it back just in time.
				// Either way it takes its place in the queue, so that the
				// jobs after it go behind it.
				due := allowed
				if r.waiter && r.due != nil {
					due = latest(due, *r.due)
				}
				if queued {
					due = latest(due, r.queuedUntil.Add(t.lim.Rate.Interval()))
				}
				if wait := due.Sub(r.now); wait <= maxSpin {
					out.sleep = max(wait, time.Millisecond)
				} else {
					out.snooze = wait - l.lead
				}
				return l.wait(ctx, tx, jobID, attempt, ts, slots, i, &due, r.now)
			}
		}

		// Every target lets the job start: take them all.
		b = &pgx.Batch{}
		for i, t := range ts {
			if t.lim.Concurrency > 0 {
				b.Queue(sqlTakeSlot, t.lim.Name, t.key, jobID, attempt)
			}
			if !t.lim.Rate.IsZero() {
				r := rates[i]
				tat := r.now
				if r.tat != nil {
					tat = latest(tat, *r.tat)
				}
				b.Queue(sqlTakeToken, t.lim.Name, t.key, tat.Add(t.lim.Rate.Interval()))
			}
		}
		b.Queue(sqlUnwaitAll, jobID)
		out.start = true
		return tx.SendBatch(ctx, b).Close()
	})
	return out, err
}

// wait queues the job on ts[at] (with due, for a rate), drops its places
// in other queues and hands on the slots it had been handed by the others.
func (l *Limiter) wait(ctx context.Context, tx pgx.Tx, jobID int64, attempt int, ts []target, slots []slotState, at int, due *time.Time, now time.Time) error {
	t := ts[at]
	b := &pgx.Batch{}
	b.Queue(sqlUnwaitOthers, jobID, t.lim.Name, t.key)
	if due != nil {
		b.Queue(sqlQueueRate, t.lim.Name, t.key, now, *due)
	}
	b.Queue(sqlWait, t.lim.Name, t.key, jobID, due)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	var give []target
	for i, o := range ts {
		if i != at && o.lim.Concurrency > 0 && slots[i].mine {
			give = append(give, o)
		}
	}
	return l.handOver(ctx, tx, jobID, attempt, give)
}

// release gives up the job's slots once it has run, and hands them to the
// jobs waiting longest. It runs after the job, whatever the job's context
// says; a release that fails leaves the slot to be found stale once River
// has written the job's outcome.
func (l *Limiter) release(ctx context.Context, jobID int64, attempt int, ts []target) {
	var give []target
	for _, t := range ts {
		if t.lim.Concurrency > 0 {
			give = append(give, t)
		}
	}
	if len(give) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error {
		names := make([]string, len(give))
		for i, t := range give {
			names[i] = t.lockName()
		}
		if _, err := tx.Exec(ctx, sqlLock, names); err != nil {
			return err
		}
		return l.handOver(ctx, tx, jobID, attempt, give)
	})
	if err != nil {
		l.logger.Warn("limits: cannot give back the job's slots; they free once its outcome is written",
			"job_id", jobID, "error", err)
	}
}

// handOver runs sqlHandOver for each target (whose lock tx holds) and
// tells the workers of the woken jobs' queues to fetch.
func (l *Limiter) handOver(ctx context.Context, tx pgx.Tx, jobID int64, attempt int, ts []target) error {
	var queues []string
	for _, t := range ts {
		rows, err := tx.Query(ctx, sqlHandOver, t.lim.Name, t.key, jobID, t.lim.Concurrency, attempt)
		if err != nil {
			return err
		}
		qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		queues = append(queues, qs...)
	}
	return l.notify(ctx, tx, queues)
}

// notify sends River's insert notification for each queue in tx, so that
// the workers of a woken job's queue fetch it now rather than at their
// next poll.
func (l *Limiter) notify(ctx context.Context, tx pgx.Tx, queues []string) error {
	slices.Sort(queues)
	queues = slices.Compact(queues)
	if len(queues) == 0 {
		return nil
	}
	payloads := make([]string, len(queues))
	for i, q := range queues {
		payloads[i] = fmt.Sprintf(`{"queue": %q}`, q)
	}
	err := riverpgxv5.New(nil).UnwrapExecutor(tx).NotifyMany(ctx, &riverdriver.NotifyManyParams{
		Payload: payloads, Schema: l.schema, Topic: "river_insert",
	})
	if err != nil {
		return fmt.Errorf("notify the queues of woken jobs: %w", err)
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
