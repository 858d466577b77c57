package liveness

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// DefaultSettleAfter is how long a job may stay running in the database,
// for a live worker that does not run it, before the worker settles it
// (Config.SettleAfter). River's completer retries a failed completion for
// at most about 37 s (three tries of at most 10 s, 1, 2 and 4 s apart) and
// then gives up; a minute is past that.
const DefaultSettleAfter = time.Minute

// Ledger is what this process's River client runs: every job whose worker
// it started, with the outcome once the worker returned, until River
// reports the outcome written (the Worker follows the client's events,
// Config.Subscribe) or a settle pass finds the job no longer running
// here. Install its Middleware outermost on the River client.
//
// A live worker can leave a job running in the database that it does not
// run, in two ways that a primary failover or a lost connection produce:
// River's fetch committed but its reply was lost (the job never reached the
// worker), or the worker finished the job and River's completer gave up
// writing the outcome. Nobody else takes such a job back: the worker is
// alive, so the rescuer rightly leaves its jobs alone, and River's own
// rescuer waits an hour. Each heartbeat, the Worker compares the jobs the
// database shows running under its client id with the Ledger and settles
// the strays (settle).
//
// The Ledger is also where the Worker's lease reaches the jobs: while the
// worker has not confirmed its liveness in time (Worker's watch), every
// running job's context is cancelled with ErrLeaseLost and no job starts
// (see Middleware).
type Ledger struct {
	mu   sync.Mutex
	jobs map[int64]*ledgerEntry
	now  func() time.Time

	// until is when the worker's lease may end, as the Worker last
	// confirmed it (nil: no lease yet, nothing held).
	until atomic.Pointer[time.Time]
}

type ledgerEntry struct {
	attempt int
	cancel  context.CancelCauseFunc // the running job's, nil once done
	done    bool
	doneAt  time.Time
	err     error // the worker's outcome, once done
}

// NewLedger returns an empty Ledger.
func NewLedger() *Ledger {
	return &Ledger{jobs: make(map[int64]*ledgerEntry), now: time.Now}
}

func (l *Ledger) started(id int64, attempt int, cancel context.CancelCauseFunc) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.jobs[id] = &ledgerEntry{attempt: attempt, cancel: cancel}
}

func (l *Ledger) finished(id int64, attempt int, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.jobs[id]; ok && e.attempt == attempt {
		e.done, e.doneAt, e.err, e.cancel = true, l.now(), err, nil
	}
}

// written drops a finished job whose outcome River's completer has
// written: the row is no longer running at that attempt.
func (l *Ledger) written(job *rivertype.JobRow) {
	if job == nil || job.State == rivertype.JobStateRunning {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if e, ok := l.jobs[job.ID]; ok && e.done && e.attempt == job.Attempt {
		delete(l.jobs, job.ID)
	}
}

// follow drops each finished job from the Ledger as River's client
// reports its outcome written (events of the client's subscription to
// its finished jobs), until events is closed or ctx ends. A job whose
// event never comes (River's completer gave up, or the subscription's
// channel was full) stays until a settle pass reads it.
func (l *Ledger) follow(ctx context.Context, events <-chan *river.Event) {
	for {
		select {
		case ev, ok := <-events:
			if !ok {
				return
			}
			l.written(ev.Job)
		case <-ctx.Done():
			return
		}
	}
}

// FinishedEvents are the kinds of River's events that say a job's outcome
// was written (Config.Subscribe).
var FinishedEvents = []river.EventKind{
	river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled,
	river.EventKindJobSnoozed, river.EventKindJobInterrupted,
}

// extend moves the end of the worker's lease to until.
func (l *Ledger) extend(until time.Time) { l.until.Store(&until) }

// expired reports whether the worker's lease may have ended: its
// liveness was not confirmed in time.
func (l *Ledger) expired() bool {
	until := l.until.Load()
	return until != nil && !time.Now().Before(*until)
}

// expire cancels every running job's context with ErrLeaseLost.
func (l *Ledger) expire() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, e := range l.jobs {
		if e.cancel != nil {
			e.cancel(ErrLeaseLost)
		}
	}
}

// Len is the number of jobs the Ledger holds (running, or finished and not
// yet seen finalized).
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.jobs)
}

// forget drops the finished jobs that returned before cutoff. The Worker
// calls it while it cannot settle (no liveness session), so that the Ledger
// of a worker that works without one does not grow without bound; a job
// forgotten that way and still shown running here is given back as never
// started once the session returns: it runs again, never less.
func (l *Ledger) forget(cutoff time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, e := range l.jobs {
		if e.done && e.doneAt.Before(cutoff) {
			delete(l.jobs, id)
		}
	}
}

// Middleware is the River worker middleware that records each job in the
// Ledger as its worker starts and returns.
//
// It also keeps the jobs within the worker's lease. A job fetched while
// the lease may have ended is not started: it is snoozed for
// heldSnooze (River gives the attempt back), and runs again here once
// the worker has confirmed its liveness, or elsewhere once the rescuer
// has taken it back. A running job's context is cancelled, with cause
// ErrLeaseLost, when the lease may end (Worker's watch); given to the
// job through JobContext, its Err reads the lease itself, so a job that
// checks it right after the process was paused past its lease finds it
// cancelled before its next step, whichever goroutine the runtime wakes
// first. A job that returns
// the cancellation's error is snoozed too, not failed: the attempt was
// cut short by its worker, not by the job.
func (l *Ledger) Middleware() rivertype.Middleware { return &ledgerMiddleware{l: l} }

// heldSnooze is how long a job fetched or cut short while the worker's
// lease may have ended waits before it is available again.
const heldSnooze = time.Second

type ledgerMiddleware struct {
	river.MiddlewareDefaults
	l *Ledger
}

var _ rivertype.WorkerMiddleware = (*ledgerMiddleware)(nil)

func (m *ledgerMiddleware) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) (err error) {
	if m.l.expired() {
		err = river.JobSnooze(heldSnooze)
		m.l.started(job.ID, job.Attempt, nil)
		m.l.finished(job.ID, job.Attempt, err)
		return err
	}
	jctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m.l.started(job.ID, job.Attempt, cancel)
	defer func() {
		if v := recover(); v != nil {
			m.l.finished(job.ID, job.Attempt, fmt.Errorf("panic: %v", v))
			panic(v)
		}
		m.l.finished(job.ID, job.Attempt, err)
	}()
	err = doInner(jctx)
	if err != nil && errors.Is(context.Cause(jctx), ErrLeaseLost) &&
		(errors.Is(err, context.Canceled) || errors.Is(err, ErrLeaseLost)) {
		err = river.JobSnooze(heldSnooze)
	}
	return err
}

// JobContext is what the worker's jobs get as their context
// (jobs.Registry.WorkersWith): ctx, the job's own (River's job timeout
// included), whose Err first ends every running job's context, with
// cause ErrLeaseLost, when the worker's lease may have ended, without
// waiting for the Worker's watch to run: after a pause of the process,
// the job's goroutine may wake first. Done and Err stay consistent: the
// cancellation reaches ctx (a child of the context Middleware gave the
// job) before Err reports.
func (l *Ledger) JobContext(ctx context.Context) context.Context {
	return &leaseContext{Context: ctx, l: l}
}

type leaseContext struct {
	context.Context
	l *Ledger
}

func (c *leaseContext) Err() error {
	if c.Context.Err() == nil && c.l.expired() {
		c.l.expire()
	}
	return c.Context.Err()
}

// A settlement is what settle writes for one stray, in River's place.
type settlement struct {
	id, attempt int64
	state       string  // the state River would have written
	giveBack    bool    // the attempt is given back: never started, or snoozed
	delay       float64 // seconds before a retryable, available or scheduled job is due
	errText     *string // the error to record
	reason      string  // "never started" or "completion lost", in metadata.ferry_settled
	count       *int    // where the pass counts it
}

// Settled counts the strays one pass settled, by what was written.
type Settled struct {
	NeverStarted int // fetched but never started here: available again, the attempt given back
	Completed    int // the worker succeeded: completed
	Failed       int // the worker failed: retryable (or discarded, no attempt left)
	Cancelled    int // the worker cancelled it (river.JobCancel)
	Snoozed      int // the worker snoozed it (river.JobSnooze)
}

// Total is every job settled.
func (s Settled) Total() int {
	return s.NeverStarted + s.Completed + s.Failed + s.Cancelled + s.Snoozed
}

const (
	// straysSQL lists the jobs running under this client id that may be
	// strays, and whether each was fetched longer than the grace ago (the
	// database's clock, as River's fetch stamped attempted_at): those due
	// longer than the grace ago ($2 seconds), and those of the ids $3 (the
	// Ledger's finished jobs that River has not reported written). A job
	// is fetched once it is due, so every job fetched longer than the
	// grace ago is in the first part.
	//
	// The first part reads River's fetch index (state, queue, priority,
	// scheduled_at, id), and the condition on scheduled_at is checked on
	// the index's own entries: of the entries a pass reads in the running
	// part of the index, most are the dead versions of jobs that have run
	// since the last vacuum, and those due within the grace are passed
	// over without a visit to the table. With 200,000 such entries a pass
	// takes 33 ms, against 80 to 90 ms when it listed every running job
	// and visited the table for each entry (docs/bench/throughput.md).
	// Jobs that waited longer than the grace before they ran are still
	// visited, until a vacuum removes them.
	straysSQL = `SELECT id, attempt, attempted_at < now() - make_interval(secs => $2) FROM river_job
WHERE state = 'running' AND scheduled_at < now() - make_interval(secs => $2)
    AND attempted_by[cardinality(attempted_by)] = $1
UNION
SELECT id, attempt, attempted_at < now() - make_interval(secs => $2) FROM river_job
WHERE id = ANY($3) AND state = 'running' AND attempted_by[cardinality(attempted_by)] = $1`
	// settleSQL writes one stray's outcome where River would have, if the
	// job is still running under this client id at that attempt. $4 is the
	// state; $5 gives the attempt back (never started, snoozed); $6 is the
	// delay before a retryable, available or scheduled job is due; $7 the
	// error to record. A failure with no attempt left is discarded.
	settleSQL = `UPDATE river_job SET
    state = CASE WHEN $4 = 'retryable' AND attempt >= max_attempts THEN 'discarded' ELSE $4 END::river_job_state,
    attempt = CASE WHEN $5 THEN attempt - 1 ELSE attempt END,
    scheduled_at = CASE WHEN $4 IN ('available', 'retryable', 'scheduled') THEN now() + make_interval(secs => $6) ELSE scheduled_at END,
    finalized_at = CASE WHEN $4 IN ('completed', 'cancelled') OR ($4 = 'retryable' AND attempt >= max_attempts) THEN now() END,
    errors = CASE WHEN $7::text IS NULL THEN errors
        ELSE array_append(errors, jsonb_build_object('at', now(), 'attempt', attempt, 'error', $7::text, 'trace', '')) END,
    metadata = metadata || jsonb_build_object('ferry_settled', $8::text)
WHERE id = $1 AND state = 'running' AND attempt = $2 AND attempted_by[cardinality(attempted_by)] = $3`
)

// settle is one pass: it lists the jobs the database shows running under
// clientID that may be strays (straysSQL) and settles each that the Ledger
// says is not running here and has not been for after: a job never started
// here (its fetch's reply was lost) goes back to available with its
// attempt given back; a job whose worker returned after ago is written as
// River would have written it (completed; retryable after River's default
// backoff, or discarded with no attempt left; cancelled; snoozed). A
// finished job not reported written and no longer running is forgotten. conn is the worker's own pool, whose sessions
// carry its tag: the fence on river_job refuses its UPDATEs once the
// worker is declared dead, and a rescue in progress waits for them (or
// they for it), exactly as River's own completions. Not the liveness
// session: a statement there that times out (the process paused mid-query)
// closes the session, frees the worker's lock, and a live worker would be
// declared dead.
//
// River's completer only writes a job still running, and by after it has
// given up, so nothing it writes later can undo what settle wrote; the one
// exception is a completer held up for longer than after (a pool starved
// for that long), whose late write of a failure could then mark a later
// attempt retryable: the job runs once more, never less.
func (l *Ledger) settle(ctx context.Context, conn *pgxpool.Pool, clientID string, after time.Duration) (Settled, error) {
	var s Settled
	listed := l.now()
	// The finished jobs River has not reported written within the grace:
	// its completer gave up, or their event was dropped.
	var unwritten []int64
	l.mu.Lock()
	for id, e := range l.jobs {
		if e.done && listed.Sub(e.doneAt) >= after {
			unwritten = append(unwritten, id)
		}
	}
	l.mu.Unlock()
	rows, err := conn.Query(ctx, straysSQL, clientID, after.Seconds(), unwritten)
	if err != nil {
		return s, fmt.Errorf("list the jobs running here: %w", err)
	}
	type running struct {
		id      int64
		attempt int
		old     bool
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (running, error) {
		var r running
		return r, row.Scan(&r.id, &r.attempt, &r.old)
	})
	if err != nil {
		return s, fmt.Errorf("list the jobs running here: %w", err)
	}
	var todo []settlement
	l.mu.Lock()
	seen := make(map[int64]bool, len(list))
	for _, r := range list {
		seen[r.id] = true
		e, ok := l.jobs[r.id]
		switch {
		case ok && e.attempt == r.attempt && !e.done:
			// Running here: never touched, however long it runs.
		case ok && e.attempt == r.attempt:
			if listed.Sub(e.doneAt) < after {
				continue // River's completer may still write it
			}
			todo = append(todo, outcome(r.id, r.attempt, e.err, &s))
		case r.old:
			todo = append(todo, settlement{id: r.id, attempt: int64(r.attempt), state: "available", giveBack: true, reason: "never started", count: &s.NeverStarted})
		}
	}
	// A finished job read by id and no longer running was written (by
	// River, or by an earlier pass).
	for _, id := range unwritten {
		if !seen[id] {
			delete(l.jobs, id)
		}
	}
	l.mu.Unlock()

	for _, t := range todo {
		tag, err := conn.Exec(ctx, settleSQL, t.id, t.attempt, clientID, t.state, t.giveBack, t.delay, t.errText, t.reason)
		if err != nil {
			return s, fmt.Errorf("settle job %d: %w", t.id, err)
		}
		if tag.RowsAffected() == 1 {
			*t.count++
		}
		l.mu.Lock()
		delete(l.jobs, t.id) // none for a job never started
		l.mu.Unlock()
	}
	return s, nil
}

// outcome is the settlement of a job whose worker returned err, as River's
// executor would have completed it.
func outcome(id int64, attempt int, err error, s *Settled) (t settlement) {
	t.id, t.attempt, t.reason = id, int64(attempt), "completion lost"
	var snooze *rivertype.JobSnoozeError
	var cancel *rivertype.JobCancelError
	switch {
	case err == nil:
		t.state, t.count = "completed", &s.Completed
	case errors.As(err, &snooze):
		t.state, t.giveBack, t.delay, t.count = "scheduled", true, snooze.Duration.Seconds(), &s.Snoozed
	case errors.As(err, &cancel):
		msg := err.Error()
		t.state, t.errText, t.count = "cancelled", &msg, &s.Cancelled
	default:
		msg := err.Error()
		// River's default retry policy: attempt⁴ seconds.
		t.state, t.errText, t.count = "retryable", &msg, &s.Failed
		t.delay = float64(attempt) * float64(attempt) * float64(attempt) * float64(attempt)
	}
	return t
}
