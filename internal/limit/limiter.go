package limit

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"maps"
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

// riverSchedulerInterval is River's scheduler interval (its default, which
// ferry keeps): River makes a job snoozed for longer scheduled, and its
// scheduler makes it available up to an interval late; a shorter snooze
// leaves it available, to be fetched at its time.
const riverSchedulerInterval = 5 * time.Second

// rateSnooze is how long a job whose rate turn comes in d sleeps: d when
// d is within River's scheduler interval; else it comes back up to an
// interval early and snoozes again for the rest, so that River's scheduler
// never makes it late.
func rateSnooze(d time.Duration) time.Duration {
	if d > riverSchedulerInterval {
		return d - riverSchedulerInterval
	}
	return max(d, 0)
}

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

	comb      combiner
	releasing sync.WaitGroup // releases under way (release)

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
		out, err := m.l.acquire(job.ID, job.Attempt, ts)
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
			defer m.l.release(job.ID, job.Attempt, ts)
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

// outcome is what a decision said: start now, try again after sleep (a
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

	// sqlSlots reads how many slots the jobs outside the batch ($3, at
	// attempts $4) hold, and which of the batch's jobs hold one already
	// (handed to them). Only when that many would refuse one of the batch's
	// $5 jobs under the concurrency $6 does it first drop the target's
	// stale slots (held by a job that no longer runs, or handed to one that
	// no longer waits to run): a stale slot only ever makes the count too
	// high, and the check costs a look-up of each holder's job. A slot
	// held by a job that runs stays held until the job stops running: a
	// killed worker's jobs hold theirs until ferry's rescue settles them.
	sqlSlots = `WITH raw AS (
    SELECT count(*) AS n FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id <> ALL($3::bigint[])),
stale AS (
    DELETE FROM ferry_limit_slot s
    WHERE (SELECT n FROM raw) + $5 > $6
      AND s.limit_name = $1 AND s.key = $2 AND s.job_id <> ALL($3::bigint[])
      AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = s.job_id AND ` + slotHeld + `)
    RETURNING 1)
SELECT (SELECT n FROM raw) - (SELECT count(*) FROM stale),
       array(SELECT s.job_id FROM ferry_limit_slot s JOIN unnest($3::bigint[], $4::int[]) AS r(id, attempt) ON s.job_id = r.id
           WHERE s.limit_name = $1 AND s.key = $2 AND (NOT s.started OR s.attempt = r.attempt))`

	// sqlRate reads the target's rate state and the database's clock
	// (every replica measures against one clock).
	sqlRate = `SELECT r.tat, r.queued_until, clock_timestamp()
FROM (SELECT 1) AS one LEFT JOIN ferry_limit_rate r ON r.limit_name = $1 AND r.key = $2`

	// sqlQueued reads the places of the batch's jobs in the target's queue.
	sqlQueued = `SELECT job_id, due FROM ferry_limit_wait WHERE limit_name = $1 AND key = $2 AND job_id = ANY($3::bigint[])`

	sqlTakeSlots = `INSERT INTO ferry_limit_slot (limit_name, key, job_id, attempt, started)
SELECT name, key, id, attempt, true FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[]) AS t(name, key, id, attempt)
ON CONFLICT (limit_name, key, job_id) DO UPDATE SET started = true, attempt = excluded.attempt, taken_at = now()`

	sqlSetRate = `INSERT INTO ferry_limit_rate (limit_name, key, tat, queued_until) VALUES ($1, $2, $3, $4)
ON CONFLICT (limit_name, key) DO UPDATE SET tat = excluded.tat, queued_until = excluded.queued_until`

	sqlUnwait = `DELETE FROM ferry_limit_wait WHERE job_id = ANY($1::bigint[])`

	// sqlUnwaitOthers drops each waiting job's places in the queues other
	// than the one it now waits in.
	sqlUnwaitOthers = `DELETE FROM ferry_limit_wait w USING unnest($1::bigint[], $2::text[], $3::text[]) AS r(id, name, key)
WHERE w.job_id = r.id AND (w.limit_name, w.key) <> (r.name, r.key)`

	sqlWait = `INSERT INTO ferry_limit_wait (limit_name, key, job_id, due)
SELECT name, key, id, due FROM unnest($1::text[], $2::text[], $3::bigint[], $4::timestamptz[]) AS t(name, key, id, due)
ON CONFLICT (limit_name, key, job_id) DO UPDATE SET due = excluded.due`

	// sqlHandOver gives the target's free slots to the jobs that wait
	// longest: each gets a slot reserved in its name and is made available
	// now (it looks for stale slots only when a job waits). The jobs $3 (at attempts $5) give their slots up first (none
	// for the sweep); $4 is the concurrency. A waiting job whose snooze
	// River has not written yet (still running) keeps its reserved slot:
	// Run wakes it once the snooze is written, or else the sweep. It
	// returns the queues of the jobs woken.
	sqlHandOver = `WITH mine AS (
    DELETE FROM ferry_limit_slot s USING unnest($3::bigint[], $5::int[]) AS r(id, attempt)
    WHERE s.limit_name = $1 AND s.key = $2 AND s.job_id = r.id AND (NOT s.started OR s.attempt = r.attempt)),
stale AS (
    DELETE FROM ferry_limit_slot s
    WHERE EXISTS (SELECT 1 FROM ferry_limit_wait WHERE limit_name = $1 AND key = $2)
      AND s.limit_name = $1 AND s.key = $2 AND s.job_id <> ALL($3::bigint[])
      AND NOT EXISTS (SELECT 1 FROM river_job j WHERE j.id = s.job_id AND ` + slotHeld + `)
    RETURNING 1),
free AS (
    SELECT $4 - (SELECT count(*) FROM ferry_limit_slot WHERE limit_name = $1 AND key = $2 AND job_id <> ALL($3::bigint[]))
              + (SELECT count(*) FROM stale) AS n),
next AS (
    SELECT job_id FROM ferry_limit_wait WHERE limit_name = $1 AND key = $2 AND job_id <> ALL($3::bigint[])
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
    FROM handed WHERE j.id = handed.job_id AND ` + snoozed + `
    RETURNING j.queue)
SELECT DISTINCT queue FROM woken`
)

// A request is one job's acquisition (its limits let it start, or not) or
// release (it has run: its slots go to the jobs waiting).
type request struct {
	release bool
	jobID   int64
	attempt int
	ts      []target

	out  outcome
	err  error
	done chan struct{} // closed once out and err are set
	lead chan struct{} // closed when this request's goroutine is to flush
}

// combiner gathers the requests of this process's jobs: whichever job asks
// while no flush is running runs one for every request pending, and hands
// the next one to the first request that came in meanwhile. Under load a
// transaction decides for many jobs at once, holding each limit's lock
// once rather than once a job.
type combiner struct {
	mu      sync.Mutex
	pending []*request
	busy    bool
}

// do returns once r is decided.
func (l *Limiter) do(r *request) {
	c := &l.comb
	r.done, r.lead = make(chan struct{}), make(chan struct{})
	c.mu.Lock()
	c.pending = append(c.pending, r)
	if c.busy {
		c.mu.Unlock()
		select {
		case <-r.done:
			return
		case <-r.lead: // r is still pending: its batch includes it
		}
		c.mu.Lock()
	}
	c.busy = true
	batch := c.pending
	c.pending = nil
	c.mu.Unlock()

	err := l.flushTx(batch)
	for _, b := range batch {
		if err != nil {
			b.out, b.err = outcome{}, err
		}
		close(b.done)
	}

	c.mu.Lock()
	if len(c.pending) > 0 {
		close(c.pending[0].lead)
	} else {
		c.busy = false
	}
	c.mu.Unlock()
}

// flushTx runs flush in a transaction of its own. A panic is an error of
// the batch: the jobs waiting on it must hear of it.
func (l *Limiter) flushTx(batch []*request) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("limits: decision failed: %v", p)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return pgx.BeginFunc(ctx, l.pool, func(tx pgx.Tx) error { return l.flush(ctx, tx, batch) })
}

// acquire decides whether the job starts now (see flush).
func (l *Limiter) acquire(jobID int64, attempt int, ts []target) (outcome, error) {
	r := &request{jobID: jobID, attempt: attempt, ts: ts}
	l.do(r)
	return r.out, r.err
}

// release gives up the job's slots once it has run, and hands them to the
// jobs waiting longest, in the background: the job's worker goes back to
// River at once, and the release joins the next decision of this process
// (the slot is held a little longer than the job ran, never shorter). A
// release that fails (or that a killed process never made) leaves the
// slot to be found stale once River has written the job's outcome.
func (l *Limiter) release(jobID int64, attempt int, ts []target) {
	var give []target
	for _, t := range ts {
		if t.lim.Concurrency > 0 {
			give = append(give, t)
		}
	}
	if len(give) == 0 {
		return
	}
	r := &request{release: true, jobID: jobID, attempt: attempt, ts: give}
	l.releasing.Go(func() {
		l.do(r)
		if r.err != nil {
			l.logger.Warn("limits: cannot give back the job's slots; they free once its outcome is written",
				"job_id", jobID, "error", r.err)
		}
	})
}

// Wait returns once the releases under way are made (a stopping worker
// calls it after its River client stopped).
func (l *Limiter) Wait() { l.releasing.Wait() }

type slotState struct {
	held int            // slots held: by jobs outside the batch, handed to the batch's, granted in it
	mine map[int64]bool // the batch's jobs that hold a slot already (handed to them)
}

type rateState struct {
	tat, queuedUntil *time.Time
	now              time.Time
	due              map[int64]*time.Time // the batch's jobs queued here, with their due
	changed          bool
}

// flush decides a batch in tx, under the locks of every target involved:
// first the releases, whose slots go to the jobs already waiting; then
// each acquisition in turn, which takes all its targets at once (a slot,
// a token) or none, and else waits in the queue of the first target that
// refuses it, giving back any slot the others had handed it.
func (l *Limiter) flush(ctx context.Context, tx pgx.Tx, batch []*request) error {
	names := map[string]target{}
	for _, r := range batch {
		for _, t := range r.ts {
			names[t.lockName()] = t
		}
	}
	// One round trip: the locks, the releases' hand-overs (so that the
	// slots they free go to the jobs already waiting), then every
	// acquisition's targets read.
	b := &pgx.Batch{}
	b.Queue(sqlLock, slices.Sorted(maps.Keys(names)))

	type jobs struct {
		ids      []int64
		attempts []int32
	}
	group := func(m map[string]*jobs, r *request, t target) {
		j := m[t.lockName()]
		if j == nil {
			j = &jobs{}
			m[t.lockName()] = j
		}
		j.ids, j.attempts = append(j.ids, r.jobID), append(j.attempts, int32(r.attempt))
	}
	freed, byTarget := map[string]*jobs{}, map[string]*jobs{}
	var acq []*request
	for _, r := range batch {
		for _, t := range r.ts {
			if r.release {
				group(freed, r, t)
			} else {
				group(byTarget, r, t)
			}
		}
		if !r.release {
			acq = append(acq, r)
		}
	}
	var queues []string
	handOver := func(b *pgx.Batch, t target, j *jobs) {
		b.Queue(sqlHandOver, t.lim.Name, t.key, j.ids, t.lim.Concurrency, j.attempts).Query(func(rows pgx.Rows) error {
			qs, err := pgx.CollectRows(rows, pgx.RowTo[string])
			queues = append(queues, qs...)
			return err
		})
	}
	for _, name := range slices.Sorted(maps.Keys(freed)) {
		handOver(b, names[name], freed[name])
	}
	slots := map[string]*slotState{}
	rates := map[string]*rateState{}
	for name, j := range byTarget {
		t := names[name]
		if t.lim.Concurrency > 0 {
			st := &slotState{mine: map[int64]bool{}}
			slots[name] = st
			b.Queue(sqlSlots, t.lim.Name, t.key, j.ids, j.attempts, len(j.ids), t.lim.Concurrency).QueryRow(func(row pgx.Row) error {
				var mine []int64
				if err := row.Scan(&st.held, &mine); err != nil {
					return err
				}
				for _, id := range mine {
					st.mine[id] = true
				}
				// A slot handed to a job of the batch is taken already.
				st.held += len(mine)
				return nil
			})
		}
		if !t.lim.Rate.IsZero() {
			rs := &rateState{due: map[int64]*time.Time{}}
			rates[name] = rs
			b.Queue(sqlRate, t.lim.Name, t.key).QueryRow(func(row pgx.Row) error {
				return row.Scan(&rs.tat, &rs.queuedUntil, &rs.now)
			})
			b.Queue(sqlQueued, t.lim.Name, t.key, j.ids).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var (
						id  int64
						due *time.Time
					)
					if err := rows.Scan(&id, &due); err != nil {
						return err
					}
					rs.due[id] = due
				}
				return rows.Err()
			})
		}
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return err
	}

	// Decide, in arrival order.
	var (
		take struct {
			names, keys []string
			ids         []int64
			attempts    []int32
		}
		granted []int64
		wait    struct {
			names, keys []string
			ids         []int64
			dues        []*time.Time
		}
		giveBack = map[string]*jobs{}
	)
	for _, r := range acq {
		at, out, due := l.decide(r, slots, rates)
		r.out = out
		if out.start {
			for _, t := range r.ts {
				name := t.lockName()
				if st := slots[name]; st != nil {
					if !st.mine[r.jobID] {
						st.held++
					}
					take.names, take.keys = append(take.names, t.lim.Name), append(take.keys, t.key)
					take.ids, take.attempts = append(take.ids, r.jobID), append(take.attempts, int32(r.attempt))
				}
				if rs := rates[name]; rs != nil {
					tat := rs.now
					if rs.tat != nil {
						tat = latest(tat, *rs.tat)
					}
					tat = tat.Add(t.lim.Rate.Interval())
					rs.tat, rs.changed = &tat, true
				}
			}
			granted = append(granted, r.jobID)
			continue
		}
		t := r.ts[at]
		if due != nil {
			rs := rates[t.lockName()]
			if rs.queuedUntil == nil || due.After(*rs.queuedUntil) {
				rs.queuedUntil = due
			}
			rs.due[r.jobID], rs.changed = due, true
		}
		wait.names, wait.keys = append(wait.names, t.lim.Name), append(wait.keys, t.key)
		wait.ids, wait.dues = append(wait.ids, r.jobID), append(wait.dues, due)
		// The slots handed to it by its other targets go on to others.
		for i, o := range r.ts {
			if st := slots[o.lockName()]; i != at && st != nil && st.mine[r.jobID] {
				j := giveBack[o.lockName()]
				if j == nil {
					j = &jobs{}
					giveBack[o.lockName()] = j
				}
				j.ids, j.attempts = append(j.ids, r.jobID), append(j.attempts, int32(r.attempt))
			}
		}
	}

	// One more: the writes, and the slots handed to the waiting jobs
	// given on.
	b = &pgx.Batch{}
	if len(take.ids) > 0 {
		b.Queue(sqlTakeSlots, take.names, take.keys, take.ids, take.attempts)
	}
	if len(granted) > 0 {
		b.Queue(sqlUnwait, granted)
	}
	if len(wait.ids) > 0 {
		b.Queue(sqlUnwaitOthers, wait.ids, wait.names, wait.keys)
		b.Queue(sqlWait, wait.names, wait.keys, wait.ids, wait.dues)
	}
	for name, rs := range rates {
		if rs.changed {
			t := names[name]
			tat := rs.now
			if rs.tat != nil {
				tat = *rs.tat
			}
			b.Queue(sqlSetRate, t.lim.Name, t.key, tat, rs.queuedUntil)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(giveBack)) {
		handOver(b, names[name], giveBack[name])
	}
	if b.Len() > 0 {
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
	return l.notify(ctx, tx, queues)
}

// decide says whether r starts now against the batch's state so far, and
// if not, which of its targets refuses it (at), what it waits for and,
// for a rate, when its turn is due.
func (l *Limiter) decide(r *request, slots map[string]*slotState, rates map[string]*rateState) (at int, out outcome, due *time.Time) {
	for i, t := range r.ts {
		name := t.lockName()
		if st := slots[name]; st != nil && !st.mine[r.jobID] && st.held >= t.lim.Concurrency {
			return i, outcome{snooze: l.backstop, parked: true}, nil
		}
		rs := rates[name]
		if rs == nil {
			continue
		}
		allowed := rs.now
		if rs.tat != nil {
			allowed = rs.tat.Add(-t.lim.Rate.tolerance())
		}
		own, waiter := rs.due[r.jobID]
		queued := !waiter && rs.queuedUntil != nil && rs.queuedUntil.After(rs.now)
		if !queued && !rs.now.Before(allowed) {
			continue
		}
		// Its turn: when the rate allows the next start, behind the jobs
		// queued before it. Near, it waits in process; further, it is
		// snoozed until a fetch brings it back just in time. Either way
		// it takes its place in the queue, so that the jobs after it go
		// behind it.
		turn := allowed
		if waiter && own != nil {
			turn = latest(turn, *own)
		}
		if queued {
			turn = latest(turn, rs.queuedUntil.Add(t.lim.Rate.Interval()))
		}
		wait := turn.Sub(rs.now)
		if wait <= maxSpin {
			return i, outcome{sleep: max(wait, time.Millisecond)}, &turn
		}
		return i, outcome{snooze: rateSnooze(wait - l.lead)}, &turn
	}
	return 0, outcome{start: true}, nil
}

// handOver runs sqlHandOver for t (whose lock tx holds), the jobs ids at
// attempts giving their slots up, and returns the queues of the jobs
// woken.
func (l *Limiter) handOver(ctx context.Context, tx pgx.Tx, t target, ids []int64, attempts []int32) ([]string, error) {
	rows, err := tx.Query(ctx, sqlHandOver, t.lim.Name, t.key, ids, t.lim.Concurrency, attempts)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
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
