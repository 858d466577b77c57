package liveness

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/loop"
)

// DefaultMaxOrphaned is how many times a job's worker may die running it
// before the job is discarded as poison (FERRY_MAX_ORPHANED).
const DefaultMaxOrphaned = 5

// DefaultRescueInterval is how often the leader's rescuer looks for dead
// workers (RescuerConfig.Interval): a killed worker's jobs, and the
// chains of ordered outbox messages they carry, go on within about a
// second of its death rather than up to a leader tick later.
const DefaultRescueInterval = time.Second

// Fencer is the leader's fence (election.Elector): a rescue is a leader
// write.
type Fencer interface {
	Fence(ctx context.Context, tx pgx.Tx) error
}

// RescuerConfig configures a Rescuer.
type RescuerConfig struct {
	Pool   *pgxpool.Pool
	Leader Fencer
	// Every is the leader tick: the longest a rescue waits for a dead
	// worker's session still in a transaction before it ends it.
	Every time.Duration
	// Interval is how often a pass looks for dead workers
	// (FERRY_RESCUE_INTERVAL); default Every. A pass that finds none is
	// one read of ferry_worker, pg_locks and pg_stat_activity.
	Interval time.Duration
	// Settle, when positive, holds the rescue back while no session of a
	// ferry worker on the server is older than Settle: the server ended
	// every session within Settle (it restarted, or a standby was
	// promoted), and a live worker whose liveness session it ended is
	// taking its lock again on a new one: at once when it heard of the
	// end (Worker's wait), else at its next heartbeat, up to a tick
	// later, and every second until the server takes connections. Set it
	// to the tick plus its timeout (the leader's deferral, which held the
	// rescue back as long before it ran with the term). Outside such a
	// window a worker whose lock is free is dead (or cut off) and rescued
	// at the next pass.
	//
	// A fleet that has just started (a deploy, a bench) has only young
	// sessions too, but nothing ended them: see Self.
	Settle time.Duration
	// Self is the client id of this process's own worker (its liveness
	// Worker), when it has one. While every ferry session is younger than
	// Settle, the rescue still goes ahead when what a server that ended
	// every session leaves behind is absent: Self holds its lock on the
	// session it registered on (a server that ended every session would
	// have ended that one too), no live worker holds its lock on a later
	// session than the one it registered on (none has taken its lock
	// again), and the server neither started nor, as a promoted standby,
	// replayed its last transaction within Settle. So a worker killed in
	// the first Settle of a fleet's life is rescued within a pass, not
	// once its fleet is Settle old. Empty: the rescue holds back for the
	// whole window.
	Self string
	// Stale is how old a worker's last heartbeat (last_seen_at) must be
	// before a pass declares it dead while a session of it (its
	// SessionTag) is still connected; default two Every plus a third. A
	// worker whose liveness session alone was ended (pg_terminate_backend,
	// an idle-session killer, a proxy restart) is alive: it takes its lock
	// again on a new session at once, and a pass that lands in between
	// must not hand its jobs to others. A process that died has no session
	// left (the server ends them all as the process goes), and is rescued
	// at the next pass; one cut off from the server (a partition, a pause)
	// keeps its pool's sessions in the server's eyes, but its liveness
	// session ends only after the lease, three ticks after its last
	// heartbeat. Set it to Worker.MaxHeartbeatAge (two ticks plus the
	// timeout): a live worker's last heartbeat is never older than that.
	Stale time.Duration
	// MaxOrphaned: the death that makes a job's count reach it discards the
	// job. Default DefaultMaxOrphaned.
	MaxOrphaned int
	// Keep is how long rows of dead and stopped workers are kept for
	// operators; default 24h.
	Keep       time.Duration
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Rescuer takes back the running jobs of dead workers. It runs on the
// leader only (Run is an election.Runnable).
type Rescuer struct {
	cfg      RescuerConfig
	mRescued *prometheus.CounterVec
	// forgotAt is when a pass last deleted old workers' rows (forgetSQL,
	// at most once a tick), in Unix nanoseconds.
	forgotAt atomic.Int64
}

// NewRescuer returns a Rescuer, registering its metric when cfg.Registerer
// is set.
func NewRescuer(cfg RescuerConfig) (*Rescuer, error) {
	cfg.MaxOrphaned = cmp.Or(cfg.MaxOrphaned, DefaultMaxOrphaned)
	cfg.Keep = cmp.Or(cfg.Keep, 24*time.Hour)
	cfg.Interval = cmp.Or(cfg.Interval, cfg.Every)
	cfg.Stale = cmp.Or(cfg.Stale, 2*cfg.Every+cfg.Every/3)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxOrphaned < 1 {
		return nil, fmt.Errorf("liveness: max orphaned %d is under 1", cfg.MaxOrphaned)
	}
	if cfg.Every <= 0 {
		return nil, fmt.Errorf("liveness: leader tick %s is not positive", cfg.Every)
	}
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("liveness: rescue interval %s is not positive", cfg.Interval)
	}
	r := &Rescuer{cfg: cfg, mRescued: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_jobs_rescued_total",
		Help: "Running jobs of dead workers taken back by ferry's rescuer, by reason: orphaned (made available again), poison (discarded: its worker died running it FERRY_MAX_ORPHANED times), exhausted (discarded: no attempt left), cancelled (its cancellation had been requested).",
	}, []string{"reason"})}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(r.mRescued); err != nil {
			return nil, fmt.Errorf("liveness: register metrics: %w", err)
		}
	}
	return r, nil
}

// Run rescues every Interval until ctx ends (leadership lost, or the
// process stopping). A failed pass returns its error, so the elector
// restarts Run with backoff. Its writes are fenced by the leader's term,
// so it may run while the leader still defers to a crashed predecessor
// (election.Elector.RegisterFenced): the death of a leader is then
// rescued within a pass, not after the deferral.
func (r *Rescuer) Run(ctx context.Context) error {
	return loop.Every(ctx, r.cfg.Interval, func(ctx context.Context) error {
		_, err := r.RescueOnce(ctx)
		return err
	})
}

// Rescue is what one pass took back from one dead worker.
type Rescue struct {
	WorkerID  int32
	ClientID  string
	Available int // made available again, the attempt counted
	Poison    int // discarded: died under its worker MaxOrphaned times
	Exhausted int // discarded: no attempt left
	Cancelled int // cancelled: someone had asked for it (River's JobCancel) before the worker died
	// SessionsEnded counts the worker's sessions the rescue ended because
	// they were still in a transaction after a tick's wait.
	SessionsEnded int
	// RiverLeader: the worker held River's leadership, which the rescue
	// resigned for it (resignRiverLeader).
	RiverLeader bool
}

// Total is every job taken back.
func (r Rescue) Total() int { return r.Available + r.Poison + r.Exhausted + r.Cancelled }

// The SQL of a pass. A worker is alive while some session holds its lock
// (Namespace, id) in this database.
const (
	// deadCandidatesSQL lists the workers whose lock nobody holds (holder:
	// the live workers whose lock a session holds, and that session's
	// start) and that are gone: no session of theirs is connected
	// (tagged), or their last heartbeat is older than $3 (Stale, in
	// seconds); unless
	// $1 (Settle, in seconds) is positive and no ferry worker's session
	// on the server (its application_name carries a SessionTag) began at
	// least $1 ago: then the server may have just ended every session,
	// and the live workers may still be taking their locks again. It lists
	// them all the same when the server shows none of what such an end
	// leaves (RescuerConfig.Self): the worker $2 holds its lock on the
	// session it registered on (its backend_start before the row's
	// started_at, which the registering transaction stamps), no live
	// worker holds its lock on a later session (or on one whose start it
	// cannot read), and the server neither started nor replayed its last
	// transaction as a standby within $1. Sessions of other roles show no
	// backend_start without pg_read_all_stats, but the pass's own pool is
	// a ferry worker's and of its own role.
	deadCandidatesSQL = `WITH holder AS (
    SELECT w.id, w.client_id, w.started_at, a.backend_start FROM ferry_worker w
    JOIN pg_locks l ON l.locktype = 'advisory' AND l.classid = ferry_liveness_namespace()::oid AND l.objid = w.id::oid
      AND l.objsubid = 2 AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    LEFT JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE w.dead_at IS NULL)
SELECT w.id, w.client_id, w.stopped_at IS NOT NULL FROM ferry_worker w
WHERE w.dead_at IS NULL AND NOT EXISTS (SELECT 1 FROM holder h WHERE h.id = w.id)
  AND (w.last_seen_at <= now() - make_interval(secs => $3::float8) OR NOT ` + workerConnectedSQL + `)
  AND ($1::float8 <= 0 OR EXISTS (
    SELECT 1 FROM pg_stat_activity a
    WHERE a.datname = current_database() AND a.application_name LIKE '%` + sessionTagPrefix + `%'
      AND a.backend_start <= now() - make_interval(secs => $1::float8))
    OR ($2::text <> ''
      AND EXISTS (SELECT 1 FROM holder h WHERE h.client_id = $2::text AND h.backend_start < h.started_at)
      AND NOT EXISTS (SELECT 1 FROM holder h WHERE h.backend_start IS NULL OR h.backend_start >= h.started_at)
      AND pg_postmaster_start_time() <= now() - make_interval(secs => $1::float8)
      AND coalesce(pg_last_xact_replay_timestamp() <= now() - make_interval(secs => $1::float8), true)))
ORDER BY w.id`
	// workerConnectedSQL: a session of the worker w (ferry_worker) is
	// connected to this database, its application_name ending in the
	// worker's SessionTag. application_name is shown for every role's
	// sessions.
	workerConnectedSQL = `EXISTS (SELECT 1 FROM pg_stat_activity a
      WHERE a.datname = current_database() AND right(a.application_name, length(w.session_tag)) = w.session_tag)`
	declareDeadSQL = `UPDATE ferry_worker SET dead_at = now() WHERE id = $1 AND dead_at IS NULL`
	// rescueSQL takes back the running jobs whose latest attempt is the
	// dead worker's, as River's rescuer would (the attempt counts; no
	// attempt left discards), but at once: available now, not retryable
	// after a backoff. A job whose worker died under it for the
	// MaxOrphaned-th time is poison and discarded. A job whose cancellation
	// was requested (River's JobCancel stamps cancel_attempted_at; the dead
	// worker never saw it) is cancelled, as River's rescuer would.
	rescueSQL = `WITH orphan AS (
    SELECT id, coalesce((metadata->>'ferry_orphaned')::int, 0) + 1 AS deaths
    FROM river_job
    WHERE state = 'running' AND attempted_by[cardinality(attempted_by)] = $1
      AND ($3::bigint IS NULL OR id = $3)
    FOR UPDATE
), verdict AS (
    SELECT o.id, o.deaths,
        CASE WHEN j.metadata->'cancel_attempted_at' IS NOT NULL THEN 'cancelled'
            WHEN o.deaths >= $2 THEN 'poison' WHEN j.attempt >= j.max_attempts THEN 'exhausted' ELSE 'available' END AS reason
    FROM orphan o JOIN river_job j USING (id)
)
UPDATE river_job j SET
    state = CASE v.reason WHEN 'available' THEN 'available' WHEN 'cancelled' THEN 'cancelled' ELSE 'discarded' END::river_job_state,
    scheduled_at = CASE v.reason WHEN 'available' THEN now() ELSE j.scheduled_at END,
    finalized_at = CASE v.reason WHEN 'available' THEN NULL ELSE now() END,
    errors = array_append(j.errors, jsonb_build_object(
        'at', now(), 'attempt', j.attempt, 'trace', '',
        'error', CASE v.reason
            WHEN 'poison' THEN format('ferry: the worker died running this job %s times', v.deaths)
            WHEN 'cancelled' THEN format('ferry: the worker running this job died (%s) before it saw the cancellation; the job is cancelled', $1::text)
            ELSE format('ferry: the worker running this job died (%s); the job was rescued', $1::text) END)),
    metadata = j.metadata || jsonb_build_object('ferry_orphaned', v.deaths)
FROM verdict v WHERE j.id = v.id
RETURNING v.reason`
	recordRescueSQL = `UPDATE ferry_worker SET rescued_jobs = rescued_jobs + $2 WHERE id = $1`
	forgetSQL       = `DELETE FROM ferry_worker WHERE dead_at < now() - make_interval(secs => $1)`
)

// RescueOnce runs one pass: every worker whose lock nobody holds is
// declared dead and its running jobs are taken back, each worker in a
// transaction of its own, fenced by the leader's term and holding the
// worker's lock, so that the worker cannot come back in the middle.
func (r *Rescuer) RescueOnce(ctx context.Context) ([]Rescue, error) {
	type candidate struct {
		id       int32
		clientID string
		stopped  bool // stopped gracefully (its hard stop may still have left jobs running)
	}
	rows, err := r.cfg.Pool.Query(ctx, deadCandidatesSQL, r.cfg.Settle.Seconds(), r.cfg.Self, r.cfg.Stale.Seconds())
	if err != nil {
		return nil, fmt.Errorf("rescue: find dead workers: %w", err)
	}
	cands, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (candidate, error) {
		var c candidate
		return c, row.Scan(&c.id, &c.clientID, &c.stopped)
	})
	if err != nil {
		return nil, fmt.Errorf("rescue: find dead workers: %w", err)
	}
	var out []Rescue
	for _, c := range cands {
		res, ok, err := r.rescue(ctx, c.id, c.clientID)
		if err != nil {
			return out, err
		}
		if !ok {
			continue
		}
		out = append(out, res)
		if res.Total() > 0 {
			r.mRescued.WithLabelValues("orphaned").Add(float64(res.Available))
			r.mRescued.WithLabelValues("poison").Add(float64(res.Poison))
			r.mRescued.WithLabelValues("exhausted").Add(float64(res.Exhausted))
			r.mRescued.WithLabelValues("cancelled").Add(float64(res.Cancelled))
			r.cfg.Logger.Warn("rescue: orphaned jobs rescued",
				"worker", c.clientID, "worker_id", c.id, "count", res.Total(),
				"available", res.Available, "poison", res.Poison, "exhausted", res.Exhausted, "cancelled", res.Cancelled,
				"sessions_ended", res.SessionsEnded)
		} else if !c.stopped {
			r.cfg.Logger.Info("rescue: worker gone, no running job", "worker", c.clientID, "worker_id", c.id)
		}
		if res.RiverLeader {
			r.cfg.Logger.Warn("rescue: River's leadership of the dead worker resigned", "worker", c.clientID, "worker_id", c.id)
		}
	}
	if last := r.forgotAt.Load(); time.Since(time.Unix(0, last)) < r.cfg.Every {
		return out, nil
	}
	if _, err := r.cfg.Pool.Exec(ctx, forgetSQL, r.cfg.Keep.Seconds()); err != nil {
		return out, fmt.Errorf("rescue: forget old workers: %w", err)
	}
	r.forgotAt.Store(time.Now().UnixNano())
	return out, nil
}

// rescue declares one worker dead and takes its jobs back, in a
// transaction fenced by the leader's term; ok is false when the worker
// turned out to be alive (its lock was taken meanwhile) or another pass got
// there first.
func (r *Rescuer) rescue(ctx context.Context, id int32, clientID string) (res Rescue, ok bool, err error) {
	res, ok, err = r.rescueTx(ctx, id, clientID)
	if isLockNotAvailable(err) {
		// Still in a transaction a tick later: a session the server cannot
		// see is gone (a partition, a host lost: its TCP keepalives take
		// hours by default), which would hold the rescue back as long. Its
		// worker is not alive (its lock is free), so its sessions are
		// ended, and the rescue tried again at once.
		ended, eerr := r.endSessions(ctx, id, clientID)
		if eerr != nil {
			return res, false, fmt.Errorf("rescue: worker %s (%d): %w", clientID, id, eerr)
		}
		if ended > 0 {
			r.cfg.Logger.Warn("rescue: ended the dead worker's sessions left in a transaction",
				"worker", clientID, "worker_id", id, "sessions", ended)
			res, ok, err = r.rescueTx(ctx, id, clientID)
			res.SessionsEnded = ended
		}
	}
	if isLockNotAvailable(err) {
		r.cfg.Logger.Warn("rescue: the worker's writes are still in flight; trying again next pass",
			"worker", clientID, "worker_id", id)
		return res, false, nil
	}
	if err != nil {
		return res, false, fmt.Errorf("rescue: worker %s (%d): %w", clientID, id, err)
	}
	return res, ok, nil
}

// rescueTx is one try of rescue, in a transaction of its own.
func (r *Rescuer) rescueTx(ctx context.Context, id int32, clientID string) (res Rescue, ok bool, err error) {
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		if err := r.cfg.Leader.Fence(ctx, tx); err != nil {
			return err
		}
		// A dead worker's session may still be in a transaction that wrote
		// river_job (a partition: the server has not seen it go); the
		// rescue waits for it at most a tick.
		if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(max(r.cfg.Every.Milliseconds(), 1000), 10)); err != nil {
			return err
		}
		res, ok, err = rescueWorker(ctx, tx, id, clientID, r.cfg.MaxOrphaned)
		return err
	})
	return res, ok, err
}

// endSessionsSQL ends the sessions of the worker tagged $1 (SessionTag)
// that are inside a transaction. Only sessions this role may signal are
// asked (its own, or any with pg_signal_backend), so that a session of
// another role is waited for rather than failing the pass.
const endSessionsSQL = `SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND xact_start IS NOT NULL
  AND right(application_name, length($1)) = $1
  AND (usename = current_user OR pg_has_role('pg_signal_backend', 'MEMBER'))`

// endSessions ends the sessions of worker id left in a transaction, while
// holding its lock for a transaction, so that a worker that has just come
// back (and so runs its jobs again) is never touched; it returns how many
// it ended.
func (r *Rescuer) endSessions(ctx context.Context, id int32, clientID string) (ended int, err error) {
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(ferry_liveness_namespace(), $1)", id).Scan(&got); err != nil {
			return fmt.Errorf("take the worker's lock: %w", err)
		}
		if !got {
			return nil // alive again
		}
		if err := tx.QueryRow(ctx, endSessionsSQL, SessionTag(clientID)).Scan(&ended); err != nil {
			return fmt.Errorf("end its sessions left in a transaction: %w", err)
		}
		return nil
	})
	return ended, err
}

func isLockNotAvailable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03"
}

// rescueWorker is the heart of a rescue, inside tx: take the worker's lock
// for the transaction (the worker cannot take it back meanwhile; if it is
// held, the worker is alive: ok false), declare it dead, take back its
// running jobs, and resign River's leadership if it held it.
func rescueWorker(ctx context.Context, tx pgx.Tx, id int32, clientID string, maxOrphaned int) (res Rescue, ok bool, err error) {
	res = Rescue{WorkerID: id, ClientID: clientID}
	var got bool
	if err := tx.QueryRow(ctx, "SELECT pg_try_advisory_xact_lock(ferry_liveness_namespace(), $1)", id).Scan(&got); err != nil {
		return res, false, fmt.Errorf("take the worker's lock: %w", err)
	}
	if !got {
		return res, false, nil // alive
	}
	tag, err := tx.Exec(ctx, declareDeadSQL, id)
	if err != nil {
		return res, false, fmt.Errorf("declare the worker dead: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return res, false, nil // declared dead already
	}
	if err := takeBack(ctx, tx, clientID, nil, maxOrphaned, &res); err != nil {
		return res, false, err
	}
	if _, err := tx.Exec(ctx, recordRescueSQL, id, res.Total()); err != nil {
		return res, false, fmt.Errorf("record the rescue: %w", err)
	}
	if res.RiverLeader, err = resignRiverLeader(ctx, tx, clientID); err != nil {
		return res, false, err
	}
	return res, true, nil
}

// riverLeadershipTopic is the channel (after the schema's name and a dot)
// on which River's clients hear of leadership changes: River's
// notifier.NotificationTopicLeadership, in a package of River's own.
const riverLeadershipTopic = "river_leadership"

// riverDriver runs River's own statements in a rescue's transaction.
var riverDriver = riverpgxv5.New(nil)

// resignRiverLeader resigns River's leadership for the dead worker
// clientID, if it holds it, in tx, with River's own statement
// (LeaderResign): its row of river_leader is deleted and the other River
// clients are told on River's leadership channel, so that one of them is
// elected within milliseconds. River's maintenance (its scheduler, which
// makes snoozed, retried and scheduled jobs available; its periodic jobs,
// cleaner and queue maintainer) runs on River's leader only, and a
// killed leader holds its row until its TTL (15 s) is over, after which
// the others notice at their next election attempt (every 5 to 6 s): up
// to about 20 s in which no scheduled job becomes available. Measured in
// the bench's rate-limit run with a kill (limit_rate_utilization): the
// runs whose killed worker was River's leader started no job for 13 s.
// Tables and channel are the connection's schema's, as for the rest of
// the rescue (ferry's sessions set search_path).
func resignRiverLeader(ctx context.Context, tx pgx.Tx, clientID string) (bool, error) {
	exec := riverDriver.UnwrapExecutor(tx)
	leader, err := exec.LeaderGetElectedLeader(ctx, &riverdriver.LeaderGetElectedLeaderParams{})
	if errors.Is(err, rivertype.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read River's leader: %w", err)
	}
	if leader.LeaderID != clientID {
		return false, nil
	}
	resigned, err := exec.LeaderResign(ctx, &riverdriver.LeaderResignParams{
		ElectedAt: leader.ElectedAt, LeaderID: clientID, LeadershipTopic: riverLeadershipTopic,
	})
	if err != nil {
		return false, fmt.Errorf("resign River's leadership: %w", err)
	}
	return resigned, nil
}

// takeBack runs rescueSQL for clientID's running jobs (only jobID when not
// nil) and counts the verdicts into res. It first waits, holding the fence
// lock exclusively, for every transaction of the worker's sessions that has
// passed the fence: an UPDATE that set a job running before the worker was
// declared dead has committed by then, and rescueSQL (a new statement, so a
// new snapshot) sees its job; an UPDATE after it reads dead_at and is
// refused.
func takeBack(ctx context.Context, tx pgx.Tx, clientID string, jobID *int64, maxOrphaned int, res *Rescue) error {
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1, hashtext($2))", FenceNamespace, clientID); err != nil {
		return fmt.Errorf("wait for the worker's writes in flight: %w", err)
	}
	rows, err := tx.Query(ctx, rescueSQL, clientID, maxOrphaned, jobID)
	if err != nil {
		return fmt.Errorf("take its jobs back: %w", err)
	}
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("take its jobs back: %w", err)
	}
	for _, reason := range reasons {
		switch reason {
		case "poison":
			res.Poison++
		case "exhausted":
			res.Exhausted++
		case "cancelled":
			res.Cancelled++
		default:
			res.Available++
		}
	}
	return nil
}
