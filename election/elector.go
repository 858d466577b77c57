package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivershared/startstop"

	"github.com/ferryq/ferry/internal/base/loop"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/lease"
)

// Defaults and limits.
const (
	// DefaultTick is the leader tick: a crashed leader's successor starts
	// its runnables a tick and its timeout (2 s) after it took the lock,
	// and a partitioned leader demotes itself within as much of the cut
	// (see the package documentation, "Why the deferral").
	DefaultTick  = 1500 * time.Millisecond
	DefaultProbe = 60 * time.Second
	// MinTick is the shortest leader tick (and standby probe) New accepts.
	MinTick = 10 * time.Millisecond
	// ResignChannel is the NOTIFY channel a resigning leader signals on; the
	// payload is the key. Standbys LISTEN on it and try the lock at once on
	// a notice.
	ResignChannel = "ferry_leader_resigned"
	// MaxStandbyPoll is the longest a standby goes between two tries of
	// the lock (the leader tick, when shorter): a holder that crashed or
	// was cut off sends no notice. A try is one short statement, four a
	// second per standby.
	MaxStandbyPoll = 250 * time.Millisecond
	// firstRetry is the first delay after a failed lock wait or a lost
	// term; it doubles up to Probe.
	firstRetry = 250 * time.Millisecond
)

// Errors.
var (
	// ErrNotLeader is returned by Fence when this process does not hold the
	// current term.
	ErrNotLeader = errors.New("election: not the leader")
	// ErrPooler is the reason an elector refuses to lead through a
	// transaction-mode pooler.
	ErrPooler = errors.New("election: the lock connection changes backend between statements (a transaction-mode pooler such as PgBouncer?); session advisory locks need a direct or session-mode connection: point FERRY_SESSION_DATABASE_URL (or FERRY_ELECTION_DATABASE_URL) at Postgres itself")
	// ErrRunnablesStillRunning is the reason a stopping leader ends its term
	// unresigned: its runnables did not return within a tick (or the tick
	// timeout, if longer) of their cancellation, so its successor must
	// defer as after a crash.
	ErrRunnablesStillRunning = errors.New("election: runnables still running after their context was cancelled")

	// ErrStoppedWhileDeferring is the reason a leader stopped during its
	// deferral ends its term unresigned: its predecessor did not resign
	// and may still be running, so the successor must defer too.
	ErrStoppedWhileDeferring = errors.New("election: stopped while deferring to a predecessor that did not resign")

	// errDemoted is the cause of the runnables' context when the term is
	// lost (Demoted).
	errDemoted = errors.New("election: demoted")
)

// Runnable is work that runs only while this process leads. Its context is
// cancelled when leadership ends; it must return promptly then. It carries
// the runnable's term: pass it (or a context derived from it) to Fence.
type Runnable func(ctx context.Context) error

// Config configures an Elector.
type Config struct {
	// DatabaseURL is the Postgres that holds the lock
	// (FERRY_ELECTION_DATABASE_URL, default DATABASE_URL). It must reach
	// Postgres directly or through a session-mode pooler.
	DatabaseURL string
	// Key is the session advisory lock (FERRY_ELECTION_KEY); default
	// KeyElection.
	Key int64
	// Tick is the leader's ownership check interval (FERRY_LEADER_TICK).
	Tick time.Duration
	// TickTimeout bounds each check (FERRY_LEADER_TICK_TIMEOUT); default a
	// third of Tick, at most 5s. A crashed leader's successor waits Tick +
	// TickTimeout. The term's own writes (record, start, resignation) are
	// bounded by writeTimeout, at least 5s, so a loaded database does not
	// cost a short tick its term.
	TickTimeout time.Duration
	// Probe caps the delay before a standby connects and waits for the
	// lock again after its wait failed (FERRY_STANDBY_PROBE): the database
	// was unreachable, or a term could not be recorded. A standby whose
	// wait works tries the lock at once on a resignation notice and every
	// min(Tick, MaxStandbyPoll) otherwise, whatever Probe says.
	Probe time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the election metrics.
	Registerer prometheus.Registerer
}

// DefaultTickTimeout is the tick timeout of an elector whose TickTimeout is
// unset: a third of tick, at most 5 s. A partitioned leader demotes within
// tick plus this timeout of the partition's start.
func DefaultTickTimeout(tick time.Duration) time.Duration { return min(tick/3, 5*time.Second) }

func (c Config) withDefaults() Config {
	c.Key = cmp.Or(c.Key, KeyElection)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	if c.TickTimeout == 0 {
		c.TickTimeout = DefaultTickTimeout(c.Tick)
	}
	c.Probe = cmp.Or(c.Probe, DefaultProbe)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// writeTimeout bounds the term's writes on the lock connection.
func (c Config) writeTimeout() time.Duration { return max(c.TickTimeout, 5*time.Second) }

// standbyPoll is how long a standby waits for a resignation notice before
// it tries the lock again: under the lease (three ticks and the timeout),
// so its idle lock session is never reaped.
func (c Config) standbyPoll() time.Duration { return min(c.Tick, MaxStandbyPoll) }

func (c Config) validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("election: database URL is empty"))
	}
	if c.Tick < MinTick {
		errs = append(errs, fmt.Errorf("election: leader tick %s is under %s", c.Tick, MinTick))
	}
	if c.TickTimeout <= 0 {
		errs = append(errs, fmt.Errorf("election: tick timeout %s must be above zero", c.TickTimeout))
	}
	if c.Probe < MinTick {
		errs = append(errs, fmt.Errorf("election: standby probe %s is under %s", c.Probe, MinTick))
	}
	return errors.Join(errs...)
}

// State is where an elector is in its state machine.
type State string

// States.
const (
	StateStarting State = "starting" // Start called, first attempt not done
	StateStandby  State = "standby"  // waiting on the lock another session holds, or retrying after an error
	StateDeferred State = "deferred" // holds the lock, waiting out a zombie predecessor
	StateLeader   State = "leader"   // holds the lock and runs the runnables
	StateStopped  State = "stopped"
)

// Status is a snapshot of an elector.
type Status struct {
	Key        int64     `json:"key"`
	State      State     `json:"state"`
	Term       int64     `json:"term"`
	Since      time.Time `json:"since"`
	Holder     string    `json:"holder"`      // this process's lock application_name
	BackendPID int       `json:"backend_pid"` // of the lock connection, while held
	LastError  string    `json:"last_error,omitempty"`
}

// Elector campaigns for one advisory key and runs its runnables while it
// leads. See the package documentation for the state machine.
type Elector struct {
	cfg      Config
	lockCfg  *pgx.ConnConfig
	auxCfg   *pgx.ConnConfig
	holder   string
	hostname string
	pid      int

	leader atomic.Bool
	// fencing is true while the fenced runnables run (from the term's
	// record, through a deferral): Fence accepts their writes then.
	fencing atomic.Bool
	term    atomic.Int64

	// BaseStartStop gives the elector ferry's one lifecycle shape: Start,
	// Stop (safe twice, and without Start), Started, Stopped.
	startstop.BaseStartStop

	mu        sync.Mutex
	status    Status
	runnables []namedRunnable
	sealed    bool // Start was called: no more Register

	ownershipSQL string

	mIsLeader    prometheus.Gauge
	mTerm        prometheus.Gauge
	mTransitions *prometheus.CounterVec
}

type namedRunnable struct {
	name string
	fn   Runnable
	// fenced: every effect of fn is a write fenced by Fence (see
	// RegisterFenced).
	fenced bool
}

// New validates cfg and returns an Elector; nothing connects until Start.
func New(cfg Config) (*Elector, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	hostname, _ := os.Hostname()
	pid := os.Getpid()
	e := &Elector{
		cfg:          cfg,
		holder:       fmt.Sprintf("ferry-leader:%s:%d", hostname, pid),
		hostname:     hostname,
		pid:          pid,
		ownershipSQL: ownershipSQL,
		mIsLeader: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_election_is_leader", Help: "1 while this process leads (runnables started), else 0.",
		}),
		mTerm: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ferry_election_term", Help: "The term this process holds, 0 when it holds none.",
		}),
		mTransitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ferry_election_transitions_total", Help: "Election state changes of this process, by new state (leader, standby, demoted, resigned).",
		}, []string{"to"}),
	}
	e.status = Status{Key: cfg.Key, State: StateStarting, Since: time.Now(), Holder: e.holder}
	var err error
	if e.lockCfg, err = e.connConfig(e.holder, true); err != nil {
		return nil, err
	}
	if e.auxCfg, err = e.connConfig(fmt.Sprintf("ferry-election:%s:%d", hostname, pid), false); err != nil {
		return nil, err
	}
	if cfg.Registerer != nil {
		for _, c := range []prometheus.Collector{e.mIsLeader, e.mTerm, e.mTransitions} {
			if err := cfg.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("election: register metrics: %w", err)
			}
		}
	}
	return e, nil
}

// connConfig parses the URL and sets what a session of the elector needs:
// its application_name (set in the startup packet, so before any lock
// statement), a statement timeout under the tick, and short TCP keepalives
// on both ends so a dead peer is noticed in seconds, not hours.
func (e *Elector) connConfig(appName string, lock bool) (*pgx.ConnConfig, error) {
	// Parsed as a pool URL so that pool settings (pool_max_conns …), which
	// DATABASE_URL may carry for the job pool, are dropped rather than sent
	// to the server as unknown parameters.
	pc, err := pgxpool.ParseConfig(e.cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("election: database URL: %s", redact.Postgres(err.Error()))
	}
	cc := pc.ConnConfig
	// The server's bound is the writes' (checks are cut short by their
	// context, which sends the server a cancel request).
	lease.Configure(cc, appName, e.cfg.Tick, e.cfg.writeTimeout())
	if lock {
		// Every statement, the leader's ownership check above all, is cut
		// off at its deadline: a cancel request's grace of a second would
		// delay a leader's demotion by that second when the network is
		// silent. A standby's wait for a notice ends at its deadline too,
		// and that leaves the connection open (no statement is in flight).
		cc.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
			return &pgconn.DeadlineContextWatcherHandler{Conn: pc.Conn()}
		}
	}
	return cc, nil
}

// Register adds a runnable. It must be called before Start.
func (e *Elector) Register(name string, fn Runnable) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sealed {
		panic("election: Register called after Start")
	}
	e.runnables = append(e.runnables, namedRunnable{name: name, fn: fn})
}

// RegisterFenced adds a runnable whose every effect is a database write
// fenced by Fence, or one that does no harm when a zombie predecessor
// does it too: it starts as soon as the term is recorded, without waiting
// out the deferral to a predecessor that did not resign. The deferral
// keeps a zombie predecessor's runnables and this term's from acting at
// once; a fenced write needs no such wait, because the term was recorded
// only after every fenced transaction of the predecessor ended, and any it
// begins later fails (see Fence). A runnable with any other effect (a
// request to an outside service, a file) must use Register. It must be
// called before Start.
func (e *Elector) RegisterFenced(name string, fn Runnable) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.sealed {
		panic("election: RegisterFenced called after Start")
	}
	e.runnables = append(e.runnables, namedRunnable{name: name, fn: fn, fenced: true})
}

// Deferral is how long a new leader defers to a predecessor that did not
// resign before it starts its runnables: the tick plus its timeout.
func (e *Elector) Deferral() time.Duration { return e.cfg.Tick + e.cfg.TickTimeout }

// IsLeader reports whether this process leads now: it holds the lock, its
// latest tick confirmed it, and its runnables run (or are being started:
// the flag is set before the first runnable runs, so a runnable's first
// Fence succeeds).
func (e *Elector) IsLeader() bool { return e.leader.Load() }

// Term is the term this process holds (also while deferred), or 0.
func (e *Elector) Term() int64 { return e.term.Load() }

// Key is the advisory key this elector campaigns for.
func (e *Elector) Key() int64 { return e.cfg.Key }

// Status returns a snapshot.
func (e *Elector) Status() Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.status
}

func (e *Elector) setState(s State, term int64, backendPID int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.status.State, e.status.Term, e.status.BackendPID, e.status.Since = s, term, backendPID, time.Now()
}

func (e *Elector) setError(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err == nil {
		e.status.LastError = ""
		return
	}
	e.status.LastError = redact.Postgres(err.Error())
}

// Start begins campaigning in the background and returns at once: an
// unreachable database delays leadership, never the caller. Cancelling ctx
// resigns like Stop, but only Stop waits for the resignation to finish. A
// Start while running does nothing; after Stop, Start campaigns again.
func (e *Elector) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := e.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	e.mu.Lock()
	e.sealed = true
	e.status.State, e.status.Since = StateStarting, time.Now()
	e.mu.Unlock()
	go func() {
		defer stopped()
		started()
		e.run(ctx)
	}()
	return nil
}

// Stop resigns gracefully if leading (runnables stopped, term stamped
// resigned, lock released, standbys notified) and waits for the elector to
// finish. Safe to call twice, and without Start. (Provided by
// startstop.BaseStartStop; documented here for the elector's meaning.)
func (e *Elector) Stop() { e.BaseStartStop.Stop() }

func (e *Elector) log() *slog.Logger {
	return e.cfg.Logger.With("key", e.cfg.Key, "pid", e.pid)
}

// run is the state machine's loop: take the lock (at once, or by waiting
// for it), lead until loss or stop, repeat.
func (e *Elector) run(ctx context.Context) {
	defer e.setState(StateStopped, 0, 0)
	retry := firstRetry
	for {
		conn, backendPID, err := e.acquire(ctx)
		if ctx.Err() != nil {
			if conn != nil {
				e.release(conn, 0, nil)
			}
			return
		}
		led := false
		if conn == nil {
			e.standby(err)
		} else {
			e.setError(nil)
		}
		if conn != nil {
			led = e.lead(ctx, conn, backendPID)
			if ctx.Err() != nil {
				return
			}
		} else {
			e.log().Warn("election: waiting on the lock failed; staying standby", "error", redact.Postgres(err.Error()), "retry_in", retry.String())
		}
		if led {
			// A term that ran ends in demotion (the lock was lost): wait on
			// the lock again at once.
			retry = firstRetry
			continue
		}
		// The wait failed or the term could not be recorded: back off, so a
		// persistent failure cannot spin.
		e.standby(nil)
		if loop.Sleep(ctx, retry) != nil {
			return
		}
		retry = min(retry*2, e.cfg.Probe)
	}
}

// standby records the standby state, logging the transition once, and
// err, when not nil, as the last error: both in one step, so that a
// Status showing the error shows the standby state too.
func (e *Elector) standby(err error) {
	e.mu.Lock()
	if err != nil {
		e.status.LastError = redact.Postgres(err.Error())
	}
	if e.status.State == StateStandby {
		e.mu.Unlock()
		return
	}
	e.status.State, e.status.Term, e.status.BackendPID, e.status.Since = StateStandby, 0, 0, time.Now()
	e.mu.Unlock()
	e.mTransitions.WithLabelValues("standby").Inc()
	e.log().Info("election: standby")
}

// acquire opens a fresh lock connection (a session that already holds the
// lock would re-enter it, so attempts never reuse one) and takes the lock on
// it: at once if it is free, otherwise once it is freed (wait). It returns
// the connection holding the lock, or an error.
func (e *Elector) acquire(ctx context.Context) (*pgx.Conn, int, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, e.lockCfg)
	if err != nil {
		return nil, 0, fmt.Errorf("connect: %w", err)
	}
	fail := func(err error) (*pgx.Conn, int, error) {
		closeQuietly(conn)
		return nil, 0, err
	}
	// A server-side lease: a holder that goes silent (partitioned, frozen)
	// has its session, and so the lock, reaped after about three ticks. The
	// leader runs a query every tick, so a live holder is never idle that
	// long, nor is a standby, which tries the lock at least every tick.
	// idle_session_timeout exists from Postgres 14 on.
	lease := 3*e.cfg.Tick + e.cfg.TickTimeout
	if ok, err := setIfKnown(cctx, conn, "idle_session_timeout", lease.Milliseconds()); err != nil {
		return fail(err)
	} else if !ok {
		e.log().Warn("election: server has no idle_session_timeout (Postgres < 14); a partitioned holder keeps the lock until TCP keepalives reap it")
	}
	var pidBefore, pidAfter int
	var got bool
	if err := conn.QueryRow(cctx, "SELECT pg_backend_pid()").Scan(&pidBefore); err != nil {
		return fail(fmt.Errorf("read backend pid: %w", err))
	}
	if err := conn.QueryRow(cctx, "SELECT pg_try_advisory_lock($1), pg_backend_pid()", e.cfg.Key).Scan(&got, &pidAfter); err != nil {
		return fail(fmt.Errorf("try lock: %w", err))
	}
	if pidBefore != pidAfter {
		return fail(ErrPooler)
	}
	if !got {
		e.standby(nil)
		if err := e.wait(ctx, conn, &pidAfter); err != nil {
			return fail(err)
		}
		if pidBefore != pidAfter {
			return fail(ErrPooler)
		}
	}
	// Confirm through pg_locks, as every tick will: fails closed if the lock
	// is not where we think it is.
	if err := e.check(context.WithoutCancel(ctx), conn); err != nil {
		e.release(conn, 0, nil)
		return nil, 0, fmt.Errorf("confirm lock: %w", err)
	}
	return conn, pidAfter, nil
}

// setIfKnown sets a session parameter in milliseconds; it reports false
// when the server does not know the parameter (an older Postgres).
func setIfKnown(ctx context.Context, conn *pgx.Conn, name string, ms int64) (bool, error) {
	if _, err := conn.Exec(ctx, "SET "+name+" = "+strconv.FormatInt(ms, 10)); err != nil {
		if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok && pgErr.Code == "42704" {
			return false, nil
		}
		return false, fmt.Errorf("set %s: %w", name, err)
	}
	return true, nil
}

// wait takes the lock once it is free, or returns when ctx ends. It
// LISTENs for resignation notices and tries the lock (pg_try_advisory_lock)
// at once on one, and otherwise every standbyPoll: a holder that crashed
// or was cut off sends none. Between tries the session is idle and holds
// no snapshot. (Waiting in pg_advisory_lock would hand the lock over a
// little sooner, but a statement that waits keeps the snapshot it began
// with, and with it the database's xmin horizon: for as long as the
// leader led, no VACUUM could remove a row version that died after the
// standby began waiting, nor an index scan skip its dead entries, and
// every table of the database, River's jobs first, would bloat.)
func (e *Elector) wait(ctx context.Context, conn *pgx.Conn, backendPID *int) error {
	lctx, cancel := context.WithTimeout(ctx, e.cfg.writeTimeout())
	_, err := conn.Exec(lctx, "LISTEN "+pgx.Identifier{ResignChannel}.Sanitize())
	cancel()
	if err != nil {
		return fmt.Errorf("listen for resignations: %w", err)
	}
	// Every statement is bounded (a partition answers nothing); the waits
	// for a notice end at each poll.
	for {
		// A try first: a leader that resigned between the caller's try
		// and the LISTEN sent its notice to nobody.
		var got bool
		tctx, cancel := context.WithTimeout(ctx, e.cfg.writeTimeout())
		err = conn.QueryRow(tctx, "SELECT pg_try_advisory_lock($1), pg_backend_pid()", e.cfg.Key).Scan(&got, backendPID)
		cancel()
		if err != nil {
			return fmt.Errorf("try lock: %w", err)
		}
		if got {
			// The leader reads no notices: none may pile up on its session.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.writeTimeout())
			defer cancel()
			if _, err := conn.Exec(uctx, "UNLISTEN *"); err != nil {
				return fmt.Errorf("unlisten: %w", err)
			}
			return nil
		}
		wctx, cancel := context.WithTimeout(ctx, e.cfg.standbyPoll())
		_, err = conn.WaitForNotification(wctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil && wctx.Err() == nil:
			return fmt.Errorf("wait for a resignation: %w", err)
		}
	}
}

// ownershipSQL is the tick's query (Elector.ownershipSQL, so that a test can
// make one elector's slow and stop it while the query is in flight).
const ownershipSQL = `SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1
  AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid = pg_backend_pid()`

// check is the leader tick: one query on the lock connection, bounded by
// TickTimeout. No row, an error or a timeout all mean the lock is lost.
// Callers pass a context that Stop does not cancel: a cancelled query makes
// pgx close the connection, and the resignation needs it.
func (e *Elector) check(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TickTimeout)
	defer cancel()
	hi, lo := lockParts(e.cfg.Key)
	var one int
	err := conn.QueryRow(ctx, e.ownershipSQL, hi, lo).Scan(&one)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return errors.New("lock not held by this session")
	case err != nil && ctx.Err() != nil:
		return fmt.Errorf("ownership check timed out after %s", e.cfg.TickTimeout)
	case err != nil:
		return fmt.Errorf("ownership check: %w", err)
	}
	return nil
}

// The term's SQL. The predecessor's row is locked FOR UPDATE and updated
// before the new term is recorded: a stale leader's Fence holds that row
// FOR SHARE until its transaction ends, so a new term cannot begin while a
// fenced write of the old one is still uncommitted (see Fence).
const (
	prevTermSQL = `SELECT term, resigned_at IS NOT NULL FROM ferry_leader_term
WHERE key = $1 ORDER BY term DESC LIMIT 1 FOR UPDATE`
	supersedeSQL  = `UPDATE ferry_leader_term SET ended_reason = coalesce(ended_reason, 'superseded') WHERE term = $1`
	insertTermSQL = `INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid)
VALUES ($1, $2, $3, $4, pg_backend_pid()) RETURNING term`
)

// beginTerm records a new term on the lock connection, in one short
// transaction, and returns it with its predecessor (nil for the first term
// of the key) and whether that predecessor resigned.
func (e *Elector) beginTerm(ctx context.Context, conn *pgx.Conn) (term int64, prev *int64, resigned bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.writeTimeout())
	defer cancel()
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var p int64
		switch err := tx.QueryRow(ctx, prevTermSQL, e.cfg.Key).Scan(&p, &resigned); {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("lock the previous term: %w", err)
		default:
			prev = &p
			if _, err := tx.Exec(ctx, supersedeSQL, p); err != nil {
				return fmt.Errorf("supersede the previous term: %w", err)
			}
		}
		if err := tx.QueryRow(ctx, insertTermSQL, e.cfg.Key, e.holder, e.hostname, e.pid).Scan(&term); err != nil {
			return fmt.Errorf("insert the term: %w", err)
		}
		return nil
	})
	return term, prev, resigned, err
}

// lead holds leadership on conn until the lock is lost or ctx ends. It
// reports whether the runnables ran.
//
// Every query on the lock connection runs on a context that ctx's
// cancellation does not reach, bounded by its own timeout (TickTimeout for
// a check, writeTimeout for the term's writes): a stop that lands mid-query
// lets the query finish, and the resignation then runs on a live
// connection.
func (e *Elector) lead(ctx context.Context, conn *pgx.Conn, backendPID int) bool {
	// A process that took the lock without ever standing by leads from
	// boot; one that waited, or led before, takes over.
	boot := e.Status().State == StateStarting
	qctx := context.WithoutCancel(ctx)
	term, prevTerm, resigned, err := e.beginTerm(qctx, conn)
	if err != nil {
		// Fail closed: no term, no runnables. Let another process try.
		e.log().Error("election: could not record the term; releasing the lock", "error", redact.Postgres(err.Error()))
		e.release(conn, 0, nil)
		e.standby(err)
		return false
	}
	e.term.Store(term)
	e.mTerm.Set(float64(term))
	// The first term of a key has no predecessor that could still run.
	deferStart := prevTerm != nil && !resigned
	msg := "election: leader acquired"
	if !boot {
		msg = "election: failover acquired"
	}
	attrs := []any{"term", term, "backend_pid", backendPID, "holder", e.holder, "deferred", deferStart}
	if prevTerm != nil {
		attrs = append(attrs, "previous_term", *prevTerm, "previous_resigned", resigned)
	}
	e.log().Info(msg, attrs...)
	e.setState(StateDeferred, term, backendPID)

	var deferC <-chan time.Time
	if deferStart {
		// The predecessor did not resign (crash, killed connection, lost
		// lock, runnables that would not stop): it may still be running its
		// runnables until its next tick. Wait that tick and its timeout out
		// before starting anything.
		t := time.NewTimer(e.cfg.Tick + e.cfg.TickTimeout)
		defer t.Stop()
		deferC = t.C
	} else {
		ready := make(chan time.Time, 1)
		ready <- time.Now()
		deferC = ready
	}

	ticker := time.NewTicker(e.cfg.Tick)
	defer ticker.Stop()
	// The fenced runnables start now, the others once the deferral is
	// over (at once when there is none).
	var sup *supervisor
	e.fencing.Store(true)
	early := e.startRunnables(term, true)
	// stopRunnables cancels the runnables and reports an error if any of
	// them is still running a tick later (or the tick timeout, if longer:
	// with a tick of 50 ms, a runnable in a query on a loaded machine took
	// longer to see its cancellation, and a clean stop became a crash for
	// its successor).
	stopRunnables := func(cause error) error {
		e.leader.Store(false)
		e.mIsLeader.Set(0)
		e.fencing.Store(false)
		var errs []error
		for _, s := range []**supervisor{&early, &sup} {
			if *s != nil {
				errs = append(errs, (*s).stop(cause, max(e.cfg.Tick, e.cfg.TickTimeout)))
				*s = nil
			}
		}
		return errors.Join(errs...)
	}
	// resign ends the term on a stop. A term still deferring never started
	// its runnables, but its predecessor may still run its own: stamping
	// it resigned would let the successor start at once, so it ends
	// unresigned and the successor defers in its turn.
	resign := func() {
		err := stopRunnables(startstop.ErrStop)
		if deferC != nil && deferStart {
			err = ErrStoppedWhileDeferring
		}
		e.release(conn, term, err)
	}
	for {
		select {
		case <-ctx.Done():
			// Run returns on a cancelled ctx: what lead reports is unused.
			resign()
			return false
		case <-deferC:
			deferC = nil
			if ctx.Err() != nil {
				resign()
				return false
			}
			// The start is stamped first and the lock checked last: the
			// check, bounded by TickTimeout, is what the runnables start on,
			// however long the stamp took.
			if err := e.markStarted(qctx, conn, term); err != nil {
				_ = stopRunnables(errDemoted)
				e.demote(conn, term, err)
				return false
			}
			if err := e.check(qctx, conn); err != nil {
				_ = stopRunnables(errDemoted)
				e.demote(conn, term, err)
				return false
			}
			// Leader before the first runnable runs: its first Fence must
			// see this process as the leader.
			e.leader.Store(true)
			e.mIsLeader.Set(1)
			sup = e.startRunnables(term, false)
			e.mTransitions.WithLabelValues("leader").Inc()
			e.setState(StateLeader, term, backendPID)
			e.log().Info("election: runnables started", "term", term, "runnables", len(e.runnables))
		case <-ticker.C:
			if ctx.Err() != nil {
				resign()
				return false
			}
			if err := e.check(qctx, conn); err != nil {
				led := sup != nil
				if serr := stopRunnables(errDemoted); serr != nil {
					err = errors.Join(err, serr)
				}
				e.demote(conn, term, err)
				return led
			}
		}
	}
}

func (e *Elector) markStarted(ctx context.Context, conn *pgx.Conn, term int64) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.writeTimeout())
	defer cancel()
	_, err := conn.Exec(ctx, "UPDATE ferry_leader_term SET started_at = now() WHERE term = $1", term)
	if err != nil {
		return fmt.Errorf("stamp term start: %w", err)
	}
	return nil
}

// demote ends a term that was lost: the runnables are already stopped (or
// given up on). The term stays unresigned, so the successor defers.
func (e *Elector) demote(conn *pgx.Conn, term int64, reason error) {
	closeQuietly(conn)
	e.term.Store(0)
	e.mTerm.Set(0)
	e.mTransitions.WithLabelValues("demoted").Inc()
	e.setError(reason)
	e.setState(StateStandby, 0, 0)
	e.log().Warn("election: demoted", "term", term, "reason", redact.Postgres(reason.Error()))
}

// release ends a term (when term > 0) and closes the lock connection. When
// the runnables stopped (stopErr nil) it resigns: stamp resigned_at, unlock,
// notify, so the successor starts at once. When they did not, it records
// why but leaves resigned_at empty, so the successor defers as after a
// crash. It runs under its own timeout, whatever the elector's context did;
// if the lock connection is gone (the lock with it), the stamp goes through
// a fresh connection, since the runnables are known to have stopped.
func (e *Elector) release(conn *pgx.Conn, term int64, stopErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.writeTimeout())
	defer cancel()
	var errs []error
	if term > 0 {
		sql, args := "UPDATE ferry_leader_term SET resigned_at = now(), ended_reason = 'resigned' WHERE term = $1", []any{term}
		if stopErr != nil {
			sql, args = "UPDATE ferry_leader_term SET ended_reason = $2 WHERE term = $1", []any{term, "abandoned: " + stopErr.Error()}
			errs = append(errs, stopErr)
		}
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			if err := e.execFresh(ctx, sql, args...); err != nil {
				errs = append(errs, fmt.Errorf("stamp the term's end: %w", err))
			}
		}
	}
	if !conn.IsClosed() {
		if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", e.cfg.Key); err != nil {
			errs = append(errs, fmt.Errorf("unlock: %w", err))
		}
		if term > 0 && stopErr == nil {
			if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", ResignChannel, strconv.FormatInt(e.cfg.Key, 10)); err != nil {
				errs = append(errs, fmt.Errorf("notify standbys: %w", err))
			}
		}
	}
	closeQuietly(conn)
	if term == 0 {
		return
	}
	e.term.Store(0)
	e.mTerm.Set(0)
	e.mTransitions.WithLabelValues("resigned").Inc()
	if err := errors.Join(errs...); err != nil {
		// Closing the connection released the lock anyway; a successor that
		// finds the term unstamped defers its start.
		e.log().Warn("election: resigned uncleanly", "term", term, "error", redact.Postgres(err.Error()))
		return
	}
	e.log().Info("election: resigned", "term", term)
}

// execFresh runs one statement on a new session of its own.
func (e *Elector) execFresh(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.ConnectConfig(ctx, e.auxCfg)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer closeQuietly(conn)
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// supervisor runs the runnables of one term.
type supervisor struct {
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	log    *slog.Logger
	// running is the names of the runnables that have not returned, for
	// the log line of a stop that waited for them in vain.
	mu      sync.Mutex
	running map[string]int
}

func (s *supervisor) still() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for name, n := range s.running {
		if n > 0 {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// runTermKey keys the runTerm of a runnable's context.
type runTermKey struct{}

// runTerm is the elector and term a runnable's context was started in.
type runTerm struct {
	e    *Elector
	term int64
}

// startRunnables starts the fenced runnables (RegisterFenced) or the
// others, of term.
func (e *Elector) startRunnables(term int64, fenced bool) *supervisor {
	// The runnables' context carries their term: Fence checks that one,
	// which outlives the cancellation (context.WithoutCancel keeps it).
	ctx, cancel := context.WithCancelCause(context.WithValue(context.Background(), runTermKey{}, runTerm{e: e, term: term}))
	s := &supervisor{cancel: cancel, log: e.log(), running: map[string]int{}}
	for _, r := range e.runnables {
		if r.fenced != fenced {
			continue
		}
		s.wg.Add(1)
		s.running[r.name]++
		go func() {
			defer s.wg.Done()
			defer func() {
				s.mu.Lock()
				s.running[r.name]--
				s.mu.Unlock()
			}()
			backoff := time.Second
			for {
				err := runSafely(ctx, r.fn)
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					s.log.Info("election: runnable finished", "runnable", r.name)
					return
				}
				s.log.Error("election: runnable failed; restarting", "runnable", r.name, "error", err, "backoff", backoff)
				if loop.Sleep(ctx, backoff) != nil {
					return
				}
				backoff = min(backoff*2, 30*time.Second)
			}
		}()
	}
	return s
}

// stop cancels the runnables and waits up to wait for them to return. It
// returns ErrRunnablesStillRunning if some are still running then.
func (s *supervisor) stop(cause error, wait time.Duration) error {
	s.cancel(cause)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-t.C:
		s.log.Error("election: runnables still running after their context was cancelled", "waited", wait, "runnables", strings.Join(s.still(), ","))
		return ErrRunnablesStillRunning
	}
}

// Demoted reports whether a runnable's ctx ended because this process lost
// its term (a failed ownership check: the lock gone, an error, a timeout)
// rather than because the elector stops. The elector logs "election:
// demoted" once every runnable has returned, and a check that failed may
// mean the database is out of reach (a partition): a runnable that says
// goodbye through the database should not wait on it then, or the demotion
// comes that much later than Tick + TickTimeout after the loss.
func Demoted(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errDemoted)
}

func runSafely(ctx context.Context, fn Runnable) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

const (
	fenceLockSQL   = `SELECT 1 FROM ferry_leader_term WHERE term = $1 FOR SHARE`
	fenceNewestSQL = `SELECT max(term) FROM ferry_leader_term WHERE key = $1`
)

// Fence checks, inside tx, that the term ctx's runnable started in is
// this process's current term and the newest of its key, and keeps it so
// until tx ends. Leader-only writes call it with their runnable's context
// (or one derived from it, context.WithoutCancel included) so that a
// stale leader's write never commits after a newer term began. It accepts
// while this process leads, and while its fenced runnables run
// (RegisterFenced: from the term's record, a deferral included). A context
// that no runnable of this elector was started with carries no term:
// Fence refuses it.
//
// The term is the runnable's, not the process's: a runnable of an earlier
// term that outlived its stop (it ignored its cancellation, or writes in
// a cleanup under context.WithoutCancel) must not pass the fence because
// its process leads again, in a later term.
//
// A check alone would not do: under READ COMMITTED a newer term could begin
// between the check and the caller's commit. So Fence first locks its
// term's row FOR SHARE, then reads the newest term in a second statement
// (a fresh snapshot). A successor records its term only after locking and
// updating its predecessor's row (see beginTerm), so either the successor
// waits for tx to end, and tx's writes commit before the new term begins,
// or the successor committed first and the second statement sees it. Under
// REPEATABLE READ or SERIALIZABLE the successor's update of the row makes
// the lock fail with a serialization error instead.
func (e *Elector) Fence(ctx context.Context, tx pgx.Tx) error {
	rt, ok := ctx.Value(runTermKey{}).(runTerm)
	if !ok || rt.e != e {
		return fmt.Errorf("%w: the context is not one of this elector's runnables (Fence takes the runnable's context)", ErrNotLeader)
	}
	term := rt.term
	if current := e.Term(); term != current || !(e.IsLeader() || e.fencing.Load()) {
		return fmt.Errorf("%w: the runnable's term %d is not this process's current term (%d)", ErrNotLeader, term, current)
	}
	var one int
	switch err := tx.QueryRow(ctx, fenceLockSQL, term).Scan(&one); {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: term %d has no record", ErrNotLeader, term)
	case err != nil:
		return fmt.Errorf("election: fence: lock term %d: %w", term, err)
	}
	var newest int64
	if err := tx.QueryRow(ctx, fenceNewestSQL, e.cfg.Key).Scan(&newest); err != nil {
		return fmt.Errorf("election: fence: read the newest term: %w", err)
	}
	if newest != term {
		return fmt.Errorf("%w: term %d superseded by %d", ErrNotLeader, term, newest)
	}
	return nil
}
