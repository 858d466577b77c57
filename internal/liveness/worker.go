package liveness

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/startstop"

	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/lease"
)

// Namespace is the first key of every worker's liveness lock, a session
// advisory lock in the two-int form: (Namespace, ferry_worker.id). It is in
// the advisory key table (election.Keys).
const Namespace int32 = 911000003

// FenceNamespace is the first key of the transaction advisory lock where a
// rescue and the fence meet: (FenceNamespace, hashtext(client id)). The
// fence on river_job (migration 015) takes it shared for every UPDATE from
// a worker's session, to the end of that transaction; a rescue takes it
// exclusively before it looks for the worker's running jobs.
const FenceNamespace int32 = 911000004

// ClientIDSetting is the session setting by which workers of earlier
// versions named the worker a session belongs to. The fence still honours
// it (a rolling deploy runs both); this version tags application_name
// instead (SessionTag).
const ClientIDSetting = "ferry.client_id"

// sessionTagPrefix starts the tag that ends a worker's application_name.
const sessionTagPrefix = "ferry-w:"

// maxApplicationName is Postgres's limit (NAMEDATALEN - 1); it cuts longer
// names, which would cut the tag.
const maxApplicationName = 63

// SessionTag is the tag that ends the application_name of every session of
// the worker clientID ("ferry-w:" and 12 hex digits of a SHA-256 of the
// client id), recorded in ferry_worker.session_tag: the fence on river_job
// (migration 016) finds a session's worker by it. Unlike a session
// setting, application_name follows a client through a transaction pooler:
// PgBouncer sets it on whichever server session it lends the client.
func SessionTag(clientID string) string {
	sum := sha256.Sum256([]byte(clientID))
	return sessionTagPrefix + hex.EncodeToString(sum[:6])
}

// SessionName is base (an application_name) cut to fit, a space, and the
// worker's SessionTag.
func SessionName(base, clientID string) string {
	tag := SessionTag(clientID)
	room := maxApplicationName - len(tag) - 1
	if len(base) > room {
		base = base[:room]
	}
	if base == "" {
		return tag
	}
	return base + " " + tag
}

// ErrCodeDeclaredDead is the SQLSTATE of the fence's refusal: an UPDATE of
// river_job from a session of a worker declared dead.
const ErrCodeDeclaredDead = "FR001"

// ErrLeaseLost is the cause with which a worker cancels its running jobs'
// contexts when it has not confirmed its liveness in time (a partition, a
// pause of the process, a database too slow to answer): the server may
// end its liveness session soon, and the rescuer then hands its jobs to
// other workers. The jobs stop first, so that no job runs twice.
var ErrLeaseLost = errors.New("liveness: this worker could not confirm in time that it is alive; its running jobs are cancelled before the server may end its session and hand them to others")

// ErrDeclaredDead is what a worker learns when it comes back after its
// liveness session was lost and finds that the rescuer declared it dead:
// its running jobs belong to others now, and it must stop.
var ErrDeclaredDead = errors.New("liveness: this worker was declared dead while its liveness session was lost, and its running jobs were rescued; it stops so that no job runs twice")

// IsDeclaredDead reports whether err is the fence's refusal of a write by a
// worker declared dead.
func IsDeclaredDead(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == ErrCodeDeclaredDead
}

// ConfigurePool makes every session of pc carry the worker clientID's
// SessionTag at the end of its application_name (kept otherwise, cut to
// fit), so that the fence knows whose session it is, directly or through
// a transaction pooler.
func ConfigurePool(pc *pgxpool.Config, clientID string) {
	pc.ConnConfig.RuntimeParams["application_name"] = SessionName(pc.ConnConfig.RuntimeParams["application_name"], clientID)
}

// Config configures a Worker.
type Config struct {
	// DatabaseURL is the Postgres that holds the liveness session: direct
	// or session-mode, like the election's.
	DatabaseURL string
	// ClientID is the River client id of this process: what River writes
	// into attempted_by.
	ClientID string
	// Tick is the heartbeat interval (the leader tick); TickTimeout bounds
	// each heartbeat. The server ends a session silent for three ticks plus
	// the timeout, so a partitioned worker becomes invisible too.
	Tick        time.Duration
	TickTimeout time.Duration
	// OnDead is called once, from the heartbeat goroutine, when the worker
	// learns that it was declared dead (ErrDeclaredDead). The process must
	// stop: its running jobs were handed to others.
	OnDead func(error)
	// Ledger, when set, is the River client's record of the jobs it runs
	// (install Ledger.Middleware on the client): after each heartbeat the
	// worker settles the jobs the database shows running here that it does
	// not run (Ledger), on Pool, the worker's own pool (ConfigurePool), which
	// Ledger needs. SettleAfter is how long such a job is left to River
	// first; default DefaultSettleAfter.
	Ledger      *Ledger
	Pool        *pgxpool.Pool
	SettleAfter time.Duration
	// Subscribe, with Ledger, is the River client's SubscribeConfig: the
	// worker follows the client's finished jobs (FinishedEvents) and drops
	// each from the Ledger once River has written its outcome. Without it
	// a finished job stays in the Ledger for SettleAfter, until a settle
	// pass reads it by id.
	Subscribe func(*river.SubscribeConfig) (<-chan *river.Event, func())
	Logger    *slog.Logger
	// Registerer, when set, gets ferry_jobs_settled_total.
	Registerer prometheus.Registerer
}

// Worker is this process's liveness: a ferry_worker row and a session that
// holds the worker's lock for as long as the process lives. It has ferry's
// one lifecycle shape (startstop).
type Worker struct {
	startstop.BaseStartStop

	cfg      Config
	connCfg  *pgx.ConnConfig
	hostname string
	pid      int

	mSettled *prometheus.CounterVec

	mu sync.Mutex
	id int32
	// until is when the server may first end the liveness session, as
	// of the last confirmation (confirm); confirmed wakes the watch.
	until     time.Time
	confirmed chan struct{}
}

// New validates cfg and returns a Worker; nothing connects until Start.
func New(cfg Config) (*Worker, error) {
	if cfg.ClientID == "" {
		return nil, errors.New("liveness: client id is empty")
	}
	if cfg.Tick <= 0 {
		return nil, fmt.Errorf("liveness: tick %s is not positive", cfg.Tick)
	}
	cfg.TickTimeout = cmp.Or(cfg.TickTimeout, min(cfg.Tick/3, 5*time.Second))
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.OnDead == nil {
		cfg.OnDead = func(error) {}
	}
	cfg.SettleAfter = cmp.Or(cfg.SettleAfter, DefaultSettleAfter)
	if cfg.Ledger != nil && cfg.Pool == nil {
		return nil, errors.New("liveness: a ledger needs the worker's pool")
	}
	if cfg.SettleAfter < 0 {
		return nil, fmt.Errorf("liveness: settle-after %s is negative", cfg.SettleAfter)
	}
	pc, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("liveness: database URL: %s", redact.Postgres(err.Error()))
	}
	hostname, _ := os.Hostname()
	w := &Worker{cfg: cfg, connCfg: pc.ConnConfig, hostname: hostname, pid: os.Getpid(), confirmed: make(chan struct{}, 1)}
	w.mSettled = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "ferry_jobs_settled_total",
		Help: "Jobs the database showed running on this live worker that it did not run, settled by the worker in River's place, by outcome: never_started (River's fetch reply was lost: available again), completed, failed, cancelled, snoozed (River's completion was lost).",
	}, []string{"outcome"})
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(w.mSettled); err != nil {
			return nil, fmt.Errorf("liveness: register metrics: %w", err)
		}
	}
	lease.Configure(w.connCfg, fmt.Sprintf("ferry-liveness:%s:%d", hostname, w.pid), cfg.Tick, max(cfg.TickTimeout, 5*time.Second))
	return w, nil
}

// ID is the worker's ferry_worker id (0 before Start).
func (w *Worker) ID() int32 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.id
}

// MaxHeartbeatAge is the oldest a live worker's last heartbeat gets, with
// room for one heartbeat or retake that a loaded server answers late: two
// ticks plus the tick timeout (RescuerConfig.Stale). A worker taking its
// lock again stamps last_seen_at at every try.
func (w *Worker) MaxHeartbeatAge() time.Duration { return 2*w.cfg.Tick + w.cfg.TickTimeout }

// ClientID is the worker's River client id.
func (w *Worker) ClientID() string { return w.cfg.ClientID }

// Start records the worker and takes its lock before it returns, so that a
// worker is visible before its River client fetches anything. A heartbeat
// every Tick then keeps the session busy and last_seen_at current. Stop
// stamps stopped_at and releases the lock.
//
// Registration is idempotent (an upsert on the client id): when the reply
// to its commit is lost, the next try finds the row it wrote and takes
// its lock, rather than failing on the unique key. It is tried every
// second for up to the lease; a worker that cannot register returns the
// error and must not work jobs: the fence refuses every write of a session
// tagged as a worker's that no live row vouches for, so a worker working
// unregistered would only sit alive and fenced. A worker found declared
// dead when it registers (its first commit's reply was lost, the session
// that held its lock with it, and the rescuer got there first) goes on
// when that rescue took no job back (none can have been its: Start must
// return before its River client starts), and returns ErrDeclaredDead
// otherwise: the process must stop.
func (w *Worker) Start(ctx context.Context) error {
	conn, err := w.registerRetrying(ctx)
	if err != nil {
		return err
	}
	ctx, shouldStart, started, stopped := w.StartInit(ctx)
	if !shouldStart {
		closeQuietly(conn)
		return nil
	}
	var events <-chan *river.Event
	unsubscribe := func() {}
	if w.cfg.Ledger != nil && w.cfg.Subscribe != nil {
		// Room for a second of a fast worker's jobs: River drops an event
		// a full channel cannot take, and the Ledger then keeps that job
		// until a settle pass reads it.
		events, unsubscribe = w.cfg.Subscribe(&river.SubscribeConfig{Kinds: FinishedEvents, ChanSize: 50_000})
	}
	go func() {
		defer stopped()
		defer unsubscribe()
		started()
		var wg sync.WaitGroup
		wg.Go(func() { w.watch(ctx) })
		if events != nil {
			wg.Go(func() { w.cfg.Ledger.follow(ctx, events) })
		}
		w.run(ctx, conn)
		wg.Wait()
	}()
	return nil
}

// registerRetrying registers the worker (register), trying again at
// once, then after 100 ms, doubling up to retakeEvery, for up to the
// lease, until ctx ends or the worker is found declared dead.
func (w *Worker) registerRetrying(ctx context.Context) (*pgx.Conn, error) {
	deadline := time.Now().Add(w.lease())
	// The first try again comes at once: the row of a try whose reply was
	// lost has no lock holder until then, and a rescue pass may find it.
	pause := time.Duration(0)
	for {
		conn, err := w.register(ctx)
		if err == nil || errors.Is(err, ErrDeclaredDead) {
			return conn, err
		}
		if time.Now().Add(pause).After(deadline) {
			return nil, fmt.Errorf("liveness: cannot register this worker, so it may not work jobs: %s", redact.Postgres(err.Error()))
		}
		w.cfg.Logger.Warn("liveness: cannot register this worker yet; trying again", "client_id", w.cfg.ClientID, "error", redact.Postgres(err.Error()))
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("liveness: register this worker: %w", context.Cause(ctx))
		case <-time.After(pause):
		}
		pause = max(retakeEvery/10, 2*pause)
		pause = min(pause, retakeEvery)
	}
}

const (
	// registerSQL records the worker, or finds the row an earlier try
	// recorded whose commit's reply was lost (and refreshes it: this
	// session registers it now).
	registerSQL = `INSERT INTO ferry_worker (client_id, hostname, pid, backend_pid, session_tag)
VALUES ($1, $2, $3, pg_backend_pid(), $4)
ON CONFLICT (client_id) DO UPDATE SET backend_pid = excluded.backend_pid, started_at = now(), last_seen_at = now()
RETURNING id`
	// registeredSQL reads, under the worker's lock, whether its row was
	// declared dead, and how many jobs the rescue took back from it.
	registeredSQL = `SELECT dead_at IS NOT NULL, rescued_jobs FROM ferry_worker WHERE id = $1`
	// reviveSQL takes back a declaration of death that took nothing back
	// (see register).
	reviveSQL    = `UPDATE ferry_worker SET dead_at = NULL WHERE id = $1 AND rescued_jobs = 0`
	heartbeatSQL = `UPDATE ferry_worker SET last_seen_at = now(), backend_pid = pg_backend_pid()
WHERE id = $1 RETURNING dead_at IS NOT NULL`
	stopSQL = `UPDATE ferry_worker SET stopped_at = now(), last_seen_at = now() WHERE id = $1`
	// seenSQL stamps last_seen_at from a session that does not hold the
	// lock yet (reacquire): the process is alive and reaches the server.
	seenSQL = `UPDATE ferry_worker SET last_seen_at = now() WHERE id = $1 AND dead_at IS NULL`
)

// lease is how long the server lets the liveness session be silent
// (idle_session_timeout): three ticks plus the tick timeout.
func (w *Worker) lease() time.Duration { return 3*w.cfg.Tick + w.cfg.TickTimeout }

// keep is how long after a statement it sent on its liveness session,
// answered, the worker keeps working: until the server may end the
// session, less the tick timeout. The server ends a session silent for
// the lease (idle_session_timeout), or sooner, when TCP keepalive
// probes go unanswered (lease.KeepaliveBound). Both clocks start no
// earlier than the statement's arrival, which is after the worker sent
// it. At the defaults (a 1.5 s tick, 0.5 s timeout): the keepalive's 4 s,
// less 0.5 s.
func (w *Worker) keep() time.Duration {
	return min(w.lease(), lease.KeepaliveBound(w.cfg.Tick)) - w.cfg.TickTimeout
}

// confirm records that a statement sent at sent on the liveness session
// was answered: the worker is alive in the server's eyes until at least
// sent plus keep.
func (w *Worker) confirm(sent time.Time) {
	until := sent.Add(w.keep())
	w.mu.Lock()
	w.until = until
	w.mu.Unlock()
	if w.cfg.Ledger != nil {
		w.cfg.Ledger.extend(until)
	}
	select {
	case w.confirmed <- struct{}{}:
	default:
	}
}

// watch holds the worker to its lease until ctx ends: when the last
// confirmation is older than keep (a heartbeat that does not come back:
// a partition, a paused process, a server too slow to answer), it
// cancels every running job (Ledger.expire), and the Ledger starts none,
// until a heartbeat or a new session confirms the worker again. The
// server cannot have ended the session yet, so no job of this worker has
// been handed to another: the jobs stop before their rescued copies can
// start.
func (w *Worker) watch(ctx context.Context) {
	t := time.NewTimer(w.keep())
	defer t.Stop()
	held := false
	for {
		w.mu.Lock()
		until := w.until
		w.mu.Unlock()
		switch left := time.Until(until); {
		case left > 0:
			if held {
				held = false
				w.cfg.Logger.Info("liveness: liveness confirmed again; starting jobs", "client_id", w.cfg.ClientID)
			}
			t.Reset(left)
		case !held:
			held = true
			w.cfg.Logger.Warn("liveness: liveness not confirmed in time; cancelling running jobs and starting none until it is, before the server may end this worker's session",
				"client_id", w.cfg.ClientID, "unconfirmed_for", (w.keep() - left).Round(time.Millisecond))
			if w.cfg.Ledger != nil {
				w.cfg.Ledger.expire()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-w.confirmed:
		case <-t.C:
		}
	}
}

// connect opens a liveness session with the server-side lease set.
func (w *Worker) connect(ctx context.Context) (*pgx.Conn, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, w.connCfg)
	if err != nil {
		return nil, fmt.Errorf("connect: %w", err)
	}
	if _, err := conn.Exec(cctx, "SET idle_session_timeout = "+strconv.FormatInt(w.lease().Milliseconds(), 10)); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42704" { // Postgres < 14 has no such setting
			closeQuietly(conn)
			return nil, fmt.Errorf("set idle_session_timeout: %w", err)
		}
	}
	return conn, nil
}

// register records the worker's row and takes its lock on a new session.
// It returns ErrDeclaredDead when the row is there and declared dead.
func (w *Worker) register(ctx context.Context) (*pgx.Conn, error) {
	conn, err := w.connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("liveness: %w", err)
	}
	// The row and the (session) lock in one transaction: the row is seen
	// only once the lock is held, so no rescuer can find the worker dead
	// before it lived. The lock is waited for (up to the tick timeout): a
	// session of this worker's whose commit reply was lost may hold it
	// until the server ends that session. dead_at is read once the lock is
	// held, when it is final (a rescue holds the same lock while it
	// declares a worker dead and takes its jobs back).
	//
	// A row declared dead whose rescue took no job back is this process's
	// own, from a try whose reply was lost: the client id is the
	// process's, and it fetches no job before Start returns. The rescue
	// took it for a dead worker's (its lock had no holder yet, and through
	// PgBouncer no session of the worker may show its tag), but it took
	// nothing from it: the worker clears dead_at and goes on, and no job
	// runs twice. A rescue that took jobs back (a process that reused a
	// dead worker's client id) stands: ErrDeclaredDead, nothing written.
	var id int32
	var dead, revived bool
	sent := time.Now()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, registerSQL, w.cfg.ClientID, w.hostname, w.pid, SessionTag(w.cfg.ClientID)).Scan(&id); err != nil {
			return fmt.Errorf("record the worker: %w", err)
		}
		if err := w.takeLock(ctx, tx, id); err != nil {
			return fmt.Errorf("take the worker's lock (ferry_liveness_namespace(), %d): %w", id, err)
		}
		var rescued int
		if err := tx.QueryRow(ctx, registeredSQL, id).Scan(&dead, &rescued); err != nil {
			return fmt.Errorf("read the worker's row: %w", err)
		}
		if !dead {
			return nil
		}
		if rescued > 0 {
			return ErrDeclaredDead // rolled back: the dead row is left as it was
		}
		if _, err := tx.Exec(ctx, reviveSQL, id); err != nil {
			return fmt.Errorf("take back the declaration of death of a worker that ran nothing: %w", err)
		}
		revived = true
		return nil
	})
	if err != nil {
		closeQuietly(conn)
		if errors.Is(err, ErrDeclaredDead) {
			w.cfg.Logger.Error("liveness: declared dead before it could register; stopping", "client_id", w.cfg.ClientID)
			return nil, err
		}
		return nil, fmt.Errorf("liveness: %w", err)
	}
	w.mu.Lock()
	w.id = id
	w.mu.Unlock()
	w.confirm(sent)
	if revived {
		w.cfg.Logger.Warn("liveness: a rescue declared this worker dead while it registered, before it ran any job; it took nothing back, so the worker goes on",
			"client_id", w.cfg.ClientID, "worker_id", id)
	}
	w.cfg.Logger.Info("liveness: worker registered", "client_id", w.cfg.ClientID, "worker_id", id)
	return conn, nil
}

// run beats until ctx ends. A worker not registered yet tries again; a
// lost session is replaced by a new one that takes the lock again, at
// once and then every second (at most every tick) until it has it, unless
// the rescuer declared the worker dead meanwhile: then OnDead, and nothing
// more. Taking the lock back at once matters after the server ended every
// session (a restart, a promoted standby, pg_terminate_backend of every
// session): the rescuer holds back only while every session is younger
// than a tick and its timeout (RescuerConfig.Settle). A loss the server
// announces (it ends the session) is seen as it happens (wait); one it
// cannot announce (a partition, a host gone) at the next heartbeat.
func (w *Worker) run(ctx context.Context, conn *pgx.Conn) {
	id := w.ID()
	t := time.NewTimer(w.cfg.Tick)
	defer t.Stop()
	var settled time.Time // the last settle pass
	for {
		lost := w.wait(ctx, conn, t)
		if ctx.Err() != nil {
			switch {
			case lost:
				closeQuietly(conn)
			case conn != nil:
				w.stop(conn, id)
			}
			return
		}
		if lost {
			w.cfg.Logger.Warn("liveness: the server ended this worker's session; taking the lock again on a new session", "client_id", w.cfg.ClientID, "worker_id", id)
			closeQuietly(conn)
			conn = nil
		}
		t.Reset(w.cfg.Tick)
		if conn == nil && w.cfg.Ledger != nil {
			w.cfg.Ledger.forget(time.Now().Add(-2 * w.cfg.SettleAfter))
		}
		if conn == nil {
			var dead bool
			if conn, dead = w.retake(ctx, id, t); dead {
				return
			}
			continue
		}
		// The heartbeat may wait as long as the server-side lease: the
		// server, not this timeout, decides whether the session lives, and a
		// shorter client timeout would close a live session (and free the
		// worker's lock) when the process merely pauses mid-statement.
		// The watch (Config.Ledger) is what acts on a heartbeat this slow:
		// it stops the worker's jobs before the server may end the session.
		bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.lease())
		var dead bool
		sent := time.Now()
		err := conn.QueryRow(bctx, heartbeatSQL, id).Scan(&dead)
		cancel()
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// The row is gone: the rescuer forgets a dead worker's row a
			// day after it declared it dead. A missing row is dead.
			dead = true
			fallthrough
		case err == nil && dead:
			// Cannot happen while this session holds the lock (the rescuer
			// takes it before it declares anyone dead); fail closed anyway.
			closeQuietly(conn)
			w.cfg.Logger.Error("liveness: declared dead; stopping", "client_id", w.cfg.ClientID, "worker_id", id)
			w.cfg.OnDead(ErrDeclaredDead)
			<-ctx.Done()
			return
		case err != nil:
			w.cfg.Logger.Warn("liveness: heartbeat failed; taking the lock again on a new session", "client_id", w.cfg.ClientID, "error", redact.Postgres(err.Error()))
			closeQuietly(conn)
			if conn, dead = w.retake(ctx, id, t); dead {
				return
			}
		default:
			w.confirm(sent)
			if time.Since(settled) >= w.settleEvery() && w.settle(ctx) {
				settled = time.Now()
			}
		}
	}
}

// wait returns when the next heartbeat is due (t fires) or ctx ends;
// lost reports that the server ended the liveness session conn
// meanwhile. While it waits it reads the idle session, on
// which the server sends nothing but the error with which it ends the
// session (a terminated backend, a shutdown) before it closes it, so
// that the worker takes its lock again at once rather than at its next
// heartbeat, up to a tick later: after the server ended every session,
// a tick and its timeout is all the rescuer waits (RescuerConfig.Settle).
// The read is interrupted by a deadline (pgx's default), which leaves
// the session open for the heartbeat.
func (w *Worker) wait(ctx context.Context, conn *pgx.Conn, t *time.Timer) (lost bool) {
	if conn == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		return false
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ended := make(chan error, 1)
	go func() { ended <- conn.PgConn().WaitForNotification(wctx) }()
	var err error
	select {
	case err = <-ended:
	case <-ctx.Done():
		cancel()
		err = <-ended // the session is stop's again
	case <-t.C:
		cancel()
		err = <-ended // the session is the heartbeat's again
	}
	// The session listens on no channel, so no notification comes: any
	// error but the interruption's (ctx's end included) is its end.
	return err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// retake tries once to take the worker's lock again on a new session
// (reacquire) and returns it; while it has none, it makes the timer t
// fire again in retakeEvery (at most a tick). dead: the worker was
// declared dead, OnDead was called and the run is over.
func (w *Worker) retake(ctx context.Context, id int32, t *time.Timer) (conn *pgx.Conn, dead bool) {
	conn, dead, answered := w.reacquire(ctx, id)
	if dead {
		w.cfg.Logger.Error("liveness: declared dead; stopping", "client_id", w.cfg.ClientID, "worker_id", id)
		w.cfg.OnDead(ErrDeclaredDead)
		<-ctx.Done()
		return nil, true
	}
	switch {
	case conn == nil && answered:
		// The server answers (the new session was ended in turn, or
		// the lock was still held after the waits): at once again.
		t.Reset(retakeEvery / 10)
	case conn == nil:
		t.Reset(min(w.cfg.Tick, retakeEvery))
	}
	return conn, false
}

// retakeEvery is how often a worker whose liveness session was lost tries
// to take its lock again.
const retakeEvery = time.Second

// settleEvery is the least time between two settle passes, which follow
// heartbeats: a quarter of SettleAfter, or the tick if longer. A stray is
// settled once it has been one for SettleAfter, so a pass every tick would
// find nothing more, sooner; each pass reads the part of River's fetch
// index that holds running jobs, dead entries of the jobs worked since the
// last vacuum included (straysSQL), so the passes cost in proportion to
// how often they run.
func (w *Worker) settleEvery() time.Duration { return max(w.cfg.Tick, w.cfg.SettleAfter/4) }

// settle settles the strays (Ledger) on the worker's pool and reports
// whether the pass succeeded: a failed pass is logged and tried again next
// tick.
func (w *Worker) settle(ctx context.Context) bool {
	if w.cfg.Ledger == nil {
		return true
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.cfg.TickTimeout)
	defer cancel()
	s, err := w.cfg.Ledger.settle(sctx, w.cfg.Pool, w.cfg.ClientID, w.cfg.SettleAfter)
	if err != nil {
		w.cfg.Logger.Warn("liveness: settling stray jobs failed; trying again next tick", "client_id", w.cfg.ClientID, "error", redact.Postgres(err.Error()))
	}
	w.count(s)
	return err == nil
}

// count counts and logs what a settle pass wrote.
func (w *Worker) count(s Settled) {
	if s.Total() == 0 {
		return
	}
	w.mSettled.WithLabelValues("never_started").Add(float64(s.NeverStarted))
	w.mSettled.WithLabelValues("completed").Add(float64(s.Completed))
	w.mSettled.WithLabelValues("failed").Add(float64(s.Failed))
	w.mSettled.WithLabelValues("cancelled").Add(float64(s.Cancelled))
	w.mSettled.WithLabelValues("snoozed").Add(float64(s.Snoozed))
	w.cfg.Logger.Warn("liveness: stray jobs settled", "client_id", w.cfg.ClientID, "count", s.Total(),
		"never_started", s.NeverStarted, "completed", s.Completed, "failed", s.Failed, "cancelled", s.Cancelled, "snoozed", s.Snoozed)
}

// reacquire opens a new session and takes the worker's lock on it. It
// reports dead when the worker's row says the rescuer declared it dead; a
// nil connection and false mean "not yet" (the old session still holds the
// lock, or the database is unreachable), answered whether the server
// answered (a new session was opened): try again, soon when it did.
//
// It waits up to the tick timeout for the lock (lock_timeout, on the
// server): a backend the server ended reports its end to the client
// before it releases its locks, and a worker that saw that end comes here
// at once, while a rescue holds the lock only for its short transaction.
func (w *Worker) reacquire(ctx context.Context, id int32) (conn *pgx.Conn, dead, answered bool) {
	conn, err := w.connect(ctx)
	if err != nil {
		return nil, false, false
	}
	// Seen alive, before the lock: a worker that can reach the server is
	// alive, and its last heartbeat stays recent while it waits for a
	// backend the server ended to let its lock go (RescuerConfig.Stale),
	// however many tries that takes.
	if _, err := conn.Exec(ctx, seenSQL, id); err != nil {
		closeQuietly(conn)
		return nil, false, true
	}
	for try := 0; ; try++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return w.takeLock(ctx, tx, id) })
		if err == nil {
			break
		}
		// Still held (an ended backend that has not let it go yet, a
		// rescue in its transaction): wait again on this session, seen
		// alive again, up to a tick.
		if !isLockNotAvailable(err) || time.Duration(try+1)*w.cfg.TickTimeout >= w.cfg.Tick {
			closeQuietly(conn)
			return nil, false, true
		}
		if _, err := conn.Exec(ctx, seenSQL, id); err != nil {
			closeQuietly(conn)
			return nil, false, true
		}
	}
	// The lock is ours: no rescuer is inside its transaction for this
	// worker (it holds the same lock while it works), so dead_at is final.
	// A row that is gone is dead too: the rescuer forgets a dead worker's
	// row a day after it declared it dead.
	sent := time.Now()
	switch err := conn.QueryRow(ctx, heartbeatSQL, id).Scan(&dead); {
	case errors.Is(err, pgx.ErrNoRows):
		dead = true
	case err != nil:
		closeQuietly(conn)
		return nil, false, true
	}
	if dead {
		// Released before the close returns, so nobody sees a dead
		// worker's lock held.
		_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock(ferry_liveness_namespace(), $1)", id)
		closeQuietly(conn)
		return nil, true, true
	}
	w.confirm(sent)
	w.cfg.Logger.Info("liveness: lock taken again on a new session", "client_id", w.cfg.ClientID, "worker_id", id)
	return conn, false, true
}

// takeLock takes the worker's lock (a session lock: it outlives tx) on
// tx's session, waiting up to the tick timeout (lock_timeout, for tx).
func (w *Worker) takeLock(ctx context.Context, tx pgx.Tx, id int32) error {
	if _, err := tx.Exec(ctx, "SELECT set_config('lock_timeout', $1, true)", strconv.FormatInt(w.cfg.TickTimeout.Milliseconds(), 10)); err != nil {
		return err
	}
	_, err := tx.Exec(ctx, "SELECT pg_advisory_lock(ferry_liveness_namespace(), $1)", id)
	return err
}

// stop stamps stopped_at, releases the lock and closes the session.
func (w *Worker) stop(conn *pgx.Conn, id int32) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.Exec(ctx, stopSQL, id); err != nil {
		w.cfg.Logger.Warn("liveness: stamp the stop", "error", redact.Postgres(err.Error()))
	}
	_, _ = conn.Exec(ctx, "SELECT pg_advisory_unlock(ferry_liveness_namespace(), $1)", id)
	closeQuietly(conn)
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}
