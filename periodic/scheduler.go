package periodic

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/jobs"
)

// maxMissedRecorded bounds how many missed ticks of one schedule a new
// leader records as skipped; older ones are counted in the log line only.
const maxMissedRecorded = 1000

// Leader is what the scheduler needs of the election: the term its writes
// carry, and a fence that fails inside a transaction once the term is stale
// (it takes the runnable's context, which carries the runnable's term).
// *election.Elector implements it.
type Leader interface {
	Term() int64
	Fence(ctx context.Context, tx pgx.Tx) error
}

// Inserter inserts River jobs in a transaction; *river.Client[pgx.Tx]
// implements it.
type Inserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// Clock is the scheduler's time source; tests pass a fake one.
type Clock interface {
	Now() time.Time
	// SleepUntil returns at t, or with ctx's error when ctx ends first.
	SleepUntil(ctx context.Context, t time.Time) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) SleepUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// Config configures a Scheduler.
type Config struct {
	Pool      *pgxpool.Pool
	Inserter  Inserter
	Leader    Leader
	Schedules []Schedule // durable and local; each part runs where it belongs
	Logger    *slog.Logger
	Clock     Clock // default: the real clock
	// Registerer, when set, receives the scheduler's metrics.
	Registerer prometheus.Registerer
}

// Scheduler turns ticks into River jobs on the leader (Run) and runs local
// schedules in every process (Start, Stop).
type Scheduler struct {
	// BaseStartStop gives the local schedules ferry's one lifecycle shape:
	// Start, Stop (safe twice, and without Start), Started, Stopped. The
	// durable schedules run as the leader runnable Run.
	startstop.BaseStartStop

	pool     *pgxpool.Pool
	inserter Inserter
	leader   Leader
	durable  []Schedule
	local    []Schedule
	log      *slog.Logger
	clock    Clock

	mu   sync.Mutex
	next map[string]time.Time // next tick per schedule, as this process sees it

	mTicks *prometheus.CounterVec
}

// New validates the schedules and returns a Scheduler.
func New(cfg Config) (*Scheduler, error) {
	schedules, err := ValidateSchedules(cfg.Schedules)
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		pool:     cfg.Pool,
		inserter: cfg.Inserter,
		leader:   cfg.Leader,
		log:      cfg.Logger,
		clock:    cfg.Clock,
		next:     map[string]time.Time{},
		mTicks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_periodic_ticks_total",
			Help: "Ticks this process claimed as leader, by schedule and status (enqueued, skipped).",
		}, []string{"schedule", "status"}),
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.clock == nil {
		s.clock = realClock{}
	}
	for _, sc := range schedules {
		if sc.Local {
			s.local = append(s.local, sc)
		} else {
			s.durable = append(s.durable, sc)
		}
	}
	if len(s.durable) > 0 && (s.pool == nil || s.inserter == nil || s.leader == nil) {
		return nil, errors.New("periodic: durable schedules need Pool, Inserter and Leader")
	}
	now := s.clock.Now()
	for _, sc := range schedules {
		s.next[sc.ID] = sc.Trigger.Next(now)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(s.mTicks); err != nil {
			return nil, fmt.Errorf("periodic: register metrics: %w", err)
		}
		if s.pool != nil {
			if err := cfg.Registerer.Register(&lastTickCollector{pool: s.pool, log: s.log}); err != nil {
				return nil, fmt.Errorf("periodic: register metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Durable reports whether any schedule needs the leader.
func (s *Scheduler) Durable() bool { return len(s.durable) > 0 }

// NextRun returns when schedule id fires next, as this process sees it.
func (s *Scheduler) NextRun(id string) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.next[id]
	return t, ok
}

func (s *Scheduler) setNext(id string, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next[id] = t
}

// Run is the leader runnable: it records the schedules in ferry_schedule,
// catches up on ticks missed while no leader ran, then claims each tick as
// it comes, until ctx ends.
func (s *Scheduler) Run(ctx context.Context) error {
	if len(s.durable) == 0 {
		<-ctx.Done()
		return nil
	}
	now := s.clock.Now()
	if err := s.sync(ctx, now); err != nil {
		return stopped(ctx, err)
	}
	cursor := map[string]time.Time{}
	for _, sc := range s.durable {
		c, err := s.catchUp(ctx, sc, now)
		if err != nil {
			return stopped(ctx, err)
		}
		cursor[sc.ID] = c
	}
	for {
		// The earliest next tick over all schedules.
		var wake time.Time
		for _, sc := range s.durable {
			n := sc.Trigger.Next(cursor[sc.ID])
			s.setNext(sc.ID, n)
			if !n.IsZero() && (wake.IsZero() || n.Before(wake)) {
				wake = n
			}
		}
		if wake.IsZero() {
			<-ctx.Done()
			return nil
		}
		if err := s.clock.SleepUntil(ctx, wake); err != nil {
			return nil // ctx ended: demoted or stopping
		}
		now := s.clock.Now()
		// Every tick due now, over all schedules, is claimed in one
		// transaction: the tenth schedule of a round minute does not wait
		// for nine transactions before it. Normally one tick per schedule
		// is due; more means this process was late (a pause, a slow
		// database): no burst, the older ones are recorded as skipped and
		// the latest is claimed.
		var reqs []claimReq
		for _, sc := range s.durable {
			due := dueTicks(sc.Trigger, cursor[sc.ID], now, maxMissedRecorded)
			if len(due) == 0 {
				continue
			}
			for _, t := range due[:len(due)-1] {
				reqs = append(reqs, claimReq{sc: sc, at: t, reason: "missed: the scheduler woke late"})
			}
			reqs = append(reqs, claimReq{sc: sc, at: due[len(due)-1]})
			cursor[sc.ID] = due[len(due)-1]
		}
		if err := s.claimBatch(ctx, reqs); err != nil {
			return stopped(ctx, err)
		}
	}
}

// stopped is Run's return for an error: nil when ctx ended (leadership lost
// or the process stopping: not a failure), else err, so that the elector
// restarts Run with backoff, which catches up on what the failure missed.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// dueTicks lists the ticks of tr after `after` and at or before now, oldest
// first, keeping at most the newest max.
func dueTicks(tr Trigger, after, now time.Time, max int) []time.Time {
	var out []time.Time
	for t := tr.Next(after); !t.IsZero() && !t.After(now); t = tr.Next(t) {
		out = append(out, t)
		if len(out) > 4*max {
			out = slices.Clone(out[len(out)-max:])
		}
	}
	if len(out) > max {
		out = out[len(out)-max:]
	}
	return out
}

// catchUp handles the ticks a schedule missed since its last recorded tick
// and returns the cursor the steady loop starts from. A schedule with no
// recorded tick starts fresh: nothing before its first leader is owed.
func (s *Scheduler) catchUp(ctx context.Context, sc Schedule, now time.Time) (time.Time, error) {
	var last *time.Time
	err := s.pool.QueryRow(ctx, "SELECT max(tick_at) FROM ferry_periodic_tick WHERE schedule_id = $1", sc.ID).Scan(&last)
	if err != nil {
		return time.Time{}, fmt.Errorf("periodic: read last tick of %s: %w", sc.ID, err)
	}
	if last == nil {
		return now, nil
	}
	// Enumerate from no earlier than maxMissedRecorded intervals back. For
	// an interval over about 106 days that span exceeds a Duration; it
	// saturates (some 292 years back) rather than wrapping into the future.
	from := *last
	if horizon := now.Add(-mulDuration(sc.Trigger.Interval(), maxMissedRecorded)); from.Before(horizon) {
		from = horizon
	}
	missed := dueTicks(sc.Trigger, from, now, maxMissedRecorded)
	if len(missed) == 0 {
		return now, nil
	}
	latest := missed[len(missed)-1]
	reqs := make([]claimReq, 0, len(missed))
	for _, t := range missed[:len(missed)-1] {
		reqs = append(reqs, claimReq{sc: sc, at: t, reason: "missed: no leader was running"})
	}
	reason := ""
	switch {
	case sc.CatchUp == CatchUpNone:
		reason = "missed: catch_up is none"
	case now.Sub(latest) > sc.Misfire:
		reason = fmt.Sprintf("missed: older than the misfire window (%s)", sc.Misfire)
	}
	if err := s.claimBatch(ctx, append(reqs, claimReq{sc: sc, at: latest, reason: reason})); err != nil {
		return time.Time{}, err
	}
	if reason == "" {
		s.log.Info("periodic: caught up", "schedule", sc.ID, "name", sc.Name, "tick", latest, "missed", len(missed))
	}
	return now, nil
}

// claimReq is one tick to claim; a non-empty reason records it as skipped.
type claimReq struct {
	sc     Schedule
	at     time.Time
	reason string
}

// claim claims one tick (see claimBatch).
func (s *Scheduler) claim(ctx context.Context, sc Schedule, t time.Time, skipReason string) error {
	return s.claimBatch(ctx, []claimReq{{sc: sc, at: t, reason: skipReason}})
}

// claimBatch records each requested tick in ferry_periodic_tick and, for a
// tick newly recorded that is neither skipped by its request nor by the
// overlap rule, enqueues its job; all in one transaction fenced by the
// leader's term. A tick already recorded (another leader, a retry) is left
// alone: a tick happens once.
func (s *Scheduler) claimBatch(ctx context.Context, reqs []claimReq) error {
	if len(reqs) == 0 {
		return nil
	}
	term := s.leader.Term()
	type key struct {
		id string
		at int64
	}
	var claimed []claimReq
	jobIDs := map[key]int64{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		claimed, jobIDs = nil, map[key]int64{}
		if err := s.leader.Fence(ctx, tx); err != nil {
			return err
		}
		ids, ats := make([]string, len(reqs)), make([]time.Time, len(reqs))
		for i, r := range reqs {
			ids[i], ats[i] = r.sc.ID, r.at
		}
		rows, err := tx.Query(ctx, `INSERT INTO ferry_periodic_tick (schedule_id, tick_at, term, status, reason)
			SELECT id, at, $3, 'skipped', 'claiming' FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at)
			ON CONFLICT DO NOTHING RETURNING schedule_id, tick_at`, ids, ats, term)
		if err != nil {
			return fmt.Errorf("record ticks: %w", err)
		}
		fresh := map[key]bool{}
		var (
			id string
			at time.Time
		)
		if _, err := pgx.ForEachRow(rows, []any{&id, &at}, func() error { fresh[key{id, at.UnixNano()}] = true; return nil }); err != nil {
			return fmt.Errorf("record ticks: %w", err)
		}
		for _, r := range reqs {
			if fresh[key{r.sc.ID, r.at.UnixNano()}] {
				claimed = append(claimed, r)
			}
		}
		if len(claimed) == 0 {
			return nil // all claimed before: by another leader, or by us before a retry
		}
		// The overlap rule, for the ticks that would enqueue.
		var overlapIDs []string
		for _, r := range claimed {
			if r.reason == "" && r.sc.Overlap == OverlapSkip {
				overlapIDs = append(overlapIDs, r.sc.ID)
			}
		}
		if len(overlapIDs) > 0 {
			busy, err := previousUnfinished(ctx, tx, overlapIDs)
			if err != nil {
				return err
			}
			for i, r := range claimed {
				if r.reason == "" && r.sc.Overlap == OverlapSkip && busy[r.sc.ID] != "" {
					claimed[i].reason = busy[r.sc.ID]
				}
			}
		}
		var (
			params  []river.InsertManyParams
			enqueue []int // indices in claimed
		)
		for i, r := range claimed {
			if r.reason == "" {
				params = append(params, river.InsertManyParams{Args: r.sc.Args, InsertOpts: s.insertOpts(r.sc, r.at)})
				enqueue = append(enqueue, i)
			}
		}
		if len(params) > 0 {
			ids, err := insertJobs(ctx, tx, s.inserter, params)
			if err != nil {
				return fmt.Errorf("insert jobs: %w", err)
			}
			for j, i := range enqueue {
				if ids[j] == 0 {
					claimed[i].reason = ReasonQueueFull
					continue
				}
				jobIDs[key{claimed[i].sc.ID, claimed[i].at.UnixNano()}] = ids[j]
			}
		}
		n := len(claimed)
		var (
			uIDs     = make([]string, n)
			uAts     = make([]time.Time, n)
			uStatus  = make([]string, n)
			uReasons = make([]*string, n)
			uJobs    = make([]*int64, n)
			uNext    = make([]*time.Time, n)
		)
		for i, r := range claimed {
			uIDs[i], uAts[i], uStatus[i], uNext[i] = r.sc.ID, r.at, "enqueued", nullableTime(r.sc.Trigger.Next(r.at))
			if r.reason != "" {
				uStatus[i], uReasons[i] = "skipped", &r.reason
			}
			uJobs[i] = nullable(jobIDs[key{r.sc.ID, r.at.UnixNano()}])
		}
		if _, err := tx.Exec(ctx, `UPDATE ferry_periodic_tick t SET status = u.status, reason = u.reason, job_id = u.job_id
			FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::bigint[]) AS u(id, at, status, reason, job_id)
			WHERE t.schedule_id = u.id AND t.tick_at = u.at`, uIDs, uAts, uStatus, uReasons, uJobs); err != nil {
			return fmt.Errorf("record tick outcomes: %w", err)
		}
		// Each schedule's newest claimed tick becomes its last tick.
		if _, err := tx.Exec(ctx, `UPDATE ferry_schedule s SET last_tick_at = u.at, last_status = u.status,
				last_job_id = coalesce(u.job_id, s.last_job_id), next_run_at = u.next, updated_at = now()
			FROM (SELECT DISTINCT ON (id) * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::bigint[], $5::timestamptz[])
				AS x(id, at, status, job_id, next) ORDER BY id, at DESC) AS u
			WHERE s.id = u.id AND (s.last_tick_at IS NULL OR s.last_tick_at <= u.at)`, uIDs, uAts, uStatus, uJobs, uNext); err != nil {
			return fmt.Errorf("update ferry_schedule: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("periodic: claim %d tick(s) from %s (%s): %w", len(reqs), reqs[0].sc.ID, reqs[0].at.UTC().Format(time.RFC3339), err)
	}
	for _, r := range claimed {
		if r.reason == "" {
			s.mTicks.WithLabelValues(r.sc.ID, "enqueued").Inc()
			s.log.Info("periodic: tick enqueued", "schedule", r.sc.ID, "name", r.sc.Name, "tick", r.at, "job_id", jobIDs[key{r.sc.ID, r.at.UnixNano()}], "term", term)
		} else {
			s.mTicks.WithLabelValues(r.sc.ID, "skipped").Inc()
			s.log.Info("periodic: tick skipped", "schedule", r.sc.ID, "name", r.sc.Name, "tick", r.at, "reason", r.reason, "term", term)
		}
	}
	return nil
}

// ReasonQueueFull is the skip reason of a tick whose job its queue refused
// because the queue is at its bound (jobs.ErrQueueFull). The tick is not
// tried again; the schedule's next tick is.
const ReasonQueueFull = "queue full"

// insertJobs inserts params in tx and returns the jobs' ids, 0 for a job
// its queue refused as full. All of them go in one statement, in a
// savepoint; when a queue refuses that statement (which refuses it whole),
// each job goes in a savepoint of its own, so that the ticks of queues
// with room are enqueued and only the full queues' are skipped.
func insertJobs(ctx context.Context, tx pgx.Tx, inserter Inserter, params []river.InsertManyParams) ([]int64, error) {
	ids := make([]int64, len(params))
	insert := func(params []river.InsertManyParams, ids []int64) error {
		return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			res, err := inserter.InsertManyTx(ctx, sp, params)
			if err != nil {
				return jobs.AsQueueFull(err)
			}
			for i, r := range res {
				ids[i] = r.Job.ID
			}
			return nil
		})
	}
	switch err := insert(params, ids); {
	case err == nil:
		return ids, nil
	case !errors.Is(err, jobs.ErrQueueFull):
		return nil, err
	case len(params) == 1:
		return ids, nil // ids[0] is 0
	}
	for i := range params {
		if err := insert(params[i:i+1], ids[i:i+1]); err != nil && !errors.Is(err, jobs.ErrQueueFull) {
			return nil, err
		}
	}
	return ids, nil
}

// previousUnfinished maps each of ids whose last job is not finished yet
// to the skip reason naming that job.
func previousUnfinished(ctx context.Context, tx pgx.Tx, ids []string) (map[string]string, error) {
	rows, err := tx.Query(ctx, `SELECT s.id, j.id, j.state::text FROM ferry_schedule s JOIN river_job j ON j.id = s.last_job_id
		WHERE s.id = ANY($1) AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')`, ids)
	if err != nil {
		return nil, fmt.Errorf("read previous jobs: %w", err)
	}
	out := map[string]string{}
	var (
		id    string
		jobID int64
		state string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &jobID, &state}, func() error {
		out[id] = fmt.Sprintf("overlap: previous run (job %d) is still %s", jobID, state)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read previous jobs: %w", err)
	}
	return out, nil
}

// insertOpts are the schedule's options plus metadata naming the tick.
func (s *Scheduler) insertOpts(sc Schedule, t time.Time) *river.InsertOpts {
	var o river.InsertOpts
	if sc.InsertOpts != nil {
		o = *sc.InsertOpts
	}
	meta := map[string]any{}
	if len(o.Metadata) > 0 {
		_ = json.Unmarshal(o.Metadata, &meta)
	}
	meta["ferry_schedule"] = sc.ID
	meta["ferry_tick"] = t.UTC().Format(time.RFC3339Nano)
	o.Metadata, _ = json.Marshal(meta)
	return &o
}

// sync upserts the durable schedules into ferry_schedule and deletes rows of
// schedules this leader no longer has. Their ticks stay in
// ferry_periodic_tick.
func (s *Scheduler) sync(ctx context.Context, now time.Time) error {
	ids := make([]string, 0, len(s.durable))
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if err := s.leader.Fence(ctx, tx); err != nil {
			return err
		}
		for _, sc := range s.durable {
			ids = append(ids, sc.ID)
			_, err := tx.Exec(ctx, `INSERT INTO ferry_schedule (id, name, trigger, zone, kind, queue, next_run_at)
				VALUES ($1, $2, $3, $4, $5, $6, $7)
				ON CONFLICT (id) DO UPDATE SET name = excluded.name, trigger = excluded.trigger, zone = excluded.zone,
					kind = excluded.kind, queue = excluded.queue, next_run_at = excluded.next_run_at, updated_at = now()`,
				sc.ID, sc.Name, sc.Trigger.String(), sc.Trigger.Zone(), sc.Args.Kind(), sc.queue(), nullableTime(sc.Trigger.Next(now)))
			if err != nil {
				return fmt.Errorf("upsert %s: %w", sc.ID, err)
			}
		}
		_, err := tx.Exec(ctx, "DELETE FROM ferry_schedule WHERE NOT (id = ANY($1))", ids)
		return err
	})
	if err != nil {
		return fmt.Errorf("periodic: record schedules in ferry_schedule: %w", err)
	}
	return nil
}

// Start runs the local schedules in this process in the background until
// Stop (or ctx ends): each on its own timer, a run that outlasts its
// interval skipping the ticks it covered (no burst), a failed run logged and
// the schedule kept. Stop cancels the runs in flight and waits for them.
func (s *Scheduler) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := s.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		defer stopped()
		started()
		var wg sync.WaitGroup
		for _, sc := range s.local {
			wg.Go(func() { s.runLocal(ctx, sc) })
		}
		wg.Wait()
		<-ctx.Done() // running until stopped, even with no local schedule left
	}()
	return nil
}

func (s *Scheduler) runLocal(ctx context.Context, sc Schedule) {
	for {
		next := sc.Trigger.Next(s.clock.Now())
		s.setNext(sc.ID, next)
		if next.IsZero() || s.clock.SleepUntil(ctx, next) != nil {
			return
		}
		if err := runLocalSafely(ctx, sc.Run); err != nil && ctx.Err() == nil {
			s.log.Error("periodic: local run failed", "schedule", sc.ID, "name", sc.Name, "tick", next, "error", err)
		}
	}
}

func runLocalSafely(ctx context.Context, fn func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	return fn(ctx)
}

// mulDuration returns d*n for d, n >= 0, saturated at the largest Duration
// when the product does not fit.
func mulDuration(d time.Duration, n int64) time.Duration {
	if n > 0 && d > math.MaxInt64/time.Duration(n) {
		return math.MaxInt64
	}
	return d * time.Duration(n)
}

func nullable(id int64) *int64 {
	if id == 0 {
		return nil
	}
	return &id
}

func nullableTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
