package admin

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/limit"
	"github.com/ferryq/ferry/internal/liveness"
	"github.com/ferryq/ferry/locks"
	"github.com/ferryq/ferry/outbox"
	"github.com/ferryq/ferry/periodic"
	"github.com/ferryq/ferry/telegram"
)

// LeaderView is the leader page: who holds the lock now, and the recent
// terms.
type LeaderView struct {
	Key    int64            `json:"key"`
	Holder *election.Holder `json:"holder"`
	Terms  []election.Term  `json:"terms"`
}

// OutboxView is the outbox page: counts by topic, route and status, and the
// stuck deliveries with their last error.
type OutboxView struct {
	Stats []outbox.Stat     `json:"stats"`
	Stuck []outbox.Delivery `json:"stuck"`
}

// Summary is the console's first page (/admin/, /admin/api/summary): the
// replica that answered, the leader, and what needs a look.
type Summary struct {
	// Replica is this process, the one that answered.
	Replica Replica `json:"replica"`
	// Leader is the session holding the leader lock, nil when none does.
	Leader *election.Holder `json:"leader"`
	// StuckDeliveries counts outbox deliveries that stopped retrying;
	// StuckMessages counts messages stuck with no route for their topic.
	StuckDeliveries int64     `json:"stuck_deliveries"`
	StuckMessages   int64     `json:"stuck_messages"`
	Jobs            JobCounts `json:"jobs"`
	// LateSchedules are the schedules whose next run is more than
	// LateAfter past: no leader ran them.
	LateSchedules []LateSchedule `json:"late_schedules"`
}

// Replica is one worker process as the summary shows it.
type Replica struct {
	// Name is the worker's name (its River client id), as the workers page
	// and River UI's attempted_by show it.
	Name     string `json:"name"`
	Hostname string `json:"hostname"`
	PID      int    `json:"pid"`
	// Role is its elector's state: leader, standby, deferred (holds the
	// lock, waiting out a predecessor that did not resign), starting or
	// stopped.
	Role string `json:"role"`
	// Term is its term while it holds the lock, else 0.
	Term int64 `json:"term,omitempty"`
}

// JobCounts are River jobs by what an operator asks of them.
type JobCounts struct {
	Running int64 `json:"running"`
	// Retryable failed their last attempt and wait for the next one.
	Retryable int64 `json:"retryable"`
	// Discarded failed for good within DiscardedWindow (the dead letters).
	Discarded int64 `json:"discarded"`
}

// LateSchedule is a schedule whose next run is past.
type LateSchedule struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	NextRunAt time.Time `json:"next_run_at"`
}

// The summary's windows.
const (
	// LateAfter is how far past its next run a schedule is late: well
	// beyond a crash failover at the default settings (20 s).
	LateAfter = time.Minute
	// DiscardedWindow is how far back the summary counts discarded jobs.
	DiscardedWindow = 24 * time.Hour
)

// Console is what ferry's pages and their JSON API show and do. The root
// package implements it over the database; tests may implement it too.
type Console interface {
	// Summary is the first page: see Summary.
	Summary(ctx context.Context) (Summary, error)
	Leader(ctx context.Context) (LeaderView, error)
	Schedules(ctx context.Context) ([]periodic.Row, error)
	Outbox(ctx context.Context) (OutboxView, error)
	// ResetOutbox puts the stuck deliveries of the messages back (enqueue
	// outbox reset).
	ResetOutbox(ctx context.Context, messageIDs []int64) (deliveries, messages int, err error)
	Telegram(ctx context.Context) ([]telegram.BotStatus, error)
	// Locks lists the named locks held now (enqueue lock list).
	Locks(ctx context.Context) ([]locks.Holder, error)
	// Limits lists the concurrency and rate limits with their use
	// (enqueue limits).
	Limits(ctx context.Context) ([]limit.Status, error)
	// Fairness lists the fair queues with their keys' weights, jobs
	// waiting, running and started (enqueue queues).
	Fairness(ctx context.Context) ([]limit.FairStatus, error)
	// Workers lists the live and lost workers, and those dead or stopped
	// within since (enqueue workers).
	Workers(ctx context.Context, since time.Duration) ([]liveness.WorkerInfo, error)
}

// TermView is a term as the leader page and its JSON show it: the row, and
// how it ended, read from the row and the lock.
type TermView struct {
	election.Term
	// End is how the term ended: "leading" (its holder has the lock now),
	// "resigned" (a graceful stop; the successor started at once),
	// "abandoned" (stopped, but its singletons did not stop in time),
	// "superseded" (it never resigned: a crash, a killed connection or a
	// lost lock, and a successor has taken over after the deferral), or
	// "crashed" (it never resigned, and no successor has yet).
	End string `json:"end"`
	// EndDetail says it for a person.
	EndDetail string `json:"end_detail"`
}

// LeaderPage is the leader page and /admin/api/leader: LeaderView with
// each term's end.
type LeaderPage struct {
	Key    int64            `json:"key"`
	Holder *election.Holder `json:"holder"`
	Terms  []TermView       `json:"terms"`
}

// leaderPage reads how each of v's terms ended. Terms come newest first;
// a term's successor is the one before it.
func leaderPage(v LeaderView) LeaderPage {
	p := LeaderPage{Key: v.Key, Holder: v.Holder, Terms: make([]TermView, len(v.Terms))}
	for i, t := range v.Terms {
		tv := TermView{Term: t}
		reason := ""
		if t.EndedReason != nil {
			reason = *t.EndedReason
		}
		successor := "a successor"
		if i > 0 {
			successor = "term " + strconv.FormatInt(v.Terms[i-1].Term, 10)
		}
		switch {
		case t.ResignedAt != nil:
			tv.End, tv.EndDetail = "resigned", "stopped gracefully; its successor started at once"
		case strings.HasPrefix(reason, "abandoned"):
			tv.End = "abandoned"
			tv.EndDetail = "stopped, but its singletons did not stop in time, so its successor deferred"
			if why, ok := strings.CutPrefix(reason, "abandoned: "); ok {
				tv.EndDetail += ": " + why
			}
		case v.Holder != nil && v.Holder.Term != nil && *v.Holder.Term == t.Term:
			tv.End, tv.EndDetail = "leading", "its holder has the lock"
		case reason == "superseded" || i > 0:
			tv.End = "superseded"
			tv.EndDetail = "never resigned (a crash, a killed connection or a lost lock); " + successor + " took over after the deferral"
		case reason != "":
			tv.End, tv.EndDetail = reason, ""
		default:
			tv.End, tv.EndDetail = "crashed", "never resigned (a crash, a killed connection or a lost lock), and no successor has the lock yet"
		}
		p.Terms[i] = tv
	}
	return p
}

// Sources are what the console reads beyond the database: the leader
// layer's and the other capabilities' state, each read when a page asks
// (the capabilities are built by then).
type Sources struct {
	// LeaderKey is the leader lock's key.
	LeaderKey int64
	// Status is this replica's part in the election (its role and term).
	Status func() election.Status
	// Events are the broadcast events the pages follow live.
	Events func() Events
	// OutboxMaxAttempts is the attempts a delivery the console resets
	// gets.
	OutboxMaxAttempts func() int
	// Telegram is the status of every configured bot.
	Telegram func() []telegram.BotStatus
	// Ready is /readyz's check.
	Ready func(context.Context) error
}

// data is the Console over a ferry server's database and sources.
type data struct {
	src     Sources
	pool    *pgxpool.Pool
	replica string // this replica's name: its River client's id
	river   func() *river.Client[pgx.Tx]
}

var _ Console = data{}

// summarySQL counts what the summary shows, each on an index: running and
// retryable jobs on River's fetch index (state first), discarded ones on
// its finalized_at index, stuck deliveries on ferry's partial index.
// Messages stuck without a route (stuck, with no delivery) are counted on
// the outbox table itself.
const summarySQL = `SELECT
	(SELECT count(*) FROM river_job WHERE state = 'running'),
	(SELECT count(*) FROM river_job WHERE state = 'retryable'),
	(SELECT count(*) FROM river_job WHERE state = 'discarded' AND finalized_at > now() - make_interval(secs => $1)),
	(SELECT count(*) FROM ferry_outbox_delivery WHERE status = 'stuck'),
	(SELECT count(*) FROM ferry_outbox o WHERE o.status = 'stuck'
		AND NOT EXISTS (SELECT 1 FROM ferry_outbox_delivery d WHERE d.message_id = o.id))`

// lateSQL lists the schedules whose next run is more than $1 seconds past.
const lateSQL = `SELECT id, name, next_run_at FROM ferry_schedule
	WHERE next_run_at < now() - make_interval(secs => $1) ORDER BY next_run_at, id LIMIT 50`

func (d data) Summary(ctx context.Context) (Summary, error) {
	st := d.src.Status()
	host, _ := os.Hostname()
	v := Summary{Replica: Replica{Name: d.replica, Hostname: host, PID: os.Getpid(), Role: string(st.State), Term: st.Term}}
	var err error
	if v.Leader, err = election.CurrentHolder(ctx, d.pool, d.src.LeaderKey); err != nil {
		return v, err
	}
	if err := d.pool.QueryRow(ctx, summarySQL, DiscardedWindow.Seconds()).Scan(
		&v.Jobs.Running, &v.Jobs.Retryable, &v.Jobs.Discarded, &v.StuckDeliveries, &v.StuckMessages); err != nil {
		return v, fmt.Errorf("ferry: count jobs and stuck deliveries: %w", err)
	}
	rows, err := d.pool.Query(ctx, lateSQL, LateAfter.Seconds())
	if err != nil {
		return v, fmt.Errorf("ferry: list late schedules: %w", err)
	}
	if v.LateSchedules, err = pgx.CollectRows(rows, pgx.RowToStructByPos[LateSchedule]); err != nil {
		return v, fmt.Errorf("ferry: list late schedules: %w", err)
	}
	return v, nil
}

func (d data) Leader(ctx context.Context) (LeaderView, error) {
	v := LeaderView{Key: d.src.LeaderKey}
	var err error
	if v.Holder, err = election.CurrentHolder(ctx, d.pool, v.Key); err != nil {
		return v, err
	}
	v.Terms, err = election.Terms(ctx, d.pool, v.Key, 20)
	return v, err
}

func (d data) Schedules(ctx context.Context) ([]periodic.Row, error) {
	return periodic.List(ctx, d.pool)
}

func (d data) Outbox(ctx context.Context) (OutboxView, error) {
	var (
		v   OutboxView
		err error
	)
	if v.Stats, err = outbox.Stats(ctx, d.pool); err != nil {
		return v, err
	}
	v.Stuck, err = outbox.List(ctx, d.pool, outbox.ListFilter{Status: "stuck", Limit: 200})
	return v, err
}

func (d data) ResetOutbox(ctx context.Context, ids []int64) (deliveries, messages int, err error) {
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) (err error) {
		deliveries, messages, err = outbox.Reset(ctx, tx, d.river(), ids, d.src.OutboxMaxAttempts())
		return err
	})
	return deliveries, messages, err
}

func (d data) Telegram(context.Context) ([]telegram.BotStatus, error) {
	return d.src.Telegram(), nil
}

func (d data) Workers(ctx context.Context, since time.Duration) ([]liveness.WorkerInfo, error) {
	return liveness.List(ctx, d.pool, since)
}

func (d data) Locks(ctx context.Context) ([]locks.Holder, error) {
	return locks.List(ctx, d.pool)
}

func (d data) Limits(ctx context.Context) ([]limit.Status, error) {
	return limit.List(ctx, d.pool)
}

func (d data) Fairness(ctx context.Context) ([]limit.FairStatus, error) {
	return limit.ListFair(ctx, d.pool)
}
