package election

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ferryq/ferry/internal/dburl"
	"github.com/ferryq/ferry/internal/pglisten"
)

// Defaults.
const (
	DefaultTick  = 15 * time.Second
	DefaultProbe = 60 * time.Second
	// ResignChannel is the NOTIFY channel a resigning leader signals on; the
	// payload is the key.
	ResignChannel = "ferry_leader_resigned"
)

// Errors.
var (
	// ErrNotLeader is returned by Fence when this process does not hold the
	// current term.
	ErrNotLeader = errors.New("election: not the leader")
	// ErrPooler is the reason an elector refuses to lead through a
	// transaction-mode pooler.
	ErrPooler = errors.New("election: the lock connection changes backend between statements (a transaction-mode pooler such as PgBouncer?); session advisory locks need a direct or session-mode connection: point FERRY_ELECTION_DATABASE_URL at Postgres itself")

	errResigning = errors.New("election: resigning")
	errDemoted   = errors.New("election: demoted")
)

// Runnable is work that runs only while this process leads. Its context is
// cancelled when leadership ends; it must return promptly then.
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
	// TickTimeout bounds each check; default a third of Tick, at most 5s.
	TickTimeout time.Duration
	// Probe is the standby's retry interval (FERRY_STANDBY_PROBE). A
	// resignation notice makes standbys probe at once.
	Probe time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer, when set, receives the election metrics.
	Registerer prometheus.Registerer
}

func (c Config) withDefaults() Config {
	c.Key = cmp.Or(c.Key, KeyElection)
	c.Tick = cmp.Or(c.Tick, DefaultTick)
	if c.TickTimeout == 0 {
		c.TickTimeout = min(c.Tick/3, 5*time.Second)
	}
	c.Probe = cmp.Or(c.Probe, DefaultProbe)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.DatabaseURL == "" {
		errs = append(errs, errors.New("election: database URL is empty"))
	}
	if c.Tick < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("election: leader tick %s is under 100ms", c.Tick))
	}
	if c.TickTimeout <= 0 || c.TickTimeout >= c.Tick {
		errs = append(errs, fmt.Errorf("election: tick timeout %s must be above zero and under the tick %s", c.TickTimeout, c.Tick))
	}
	if c.Probe < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("election: standby probe %s is under 100ms", c.Probe))
	}
	return errors.Join(errs...)
}

// State is where an elector is in its state machine.
type State string

// States.
const (
	StateStarting State = "starting" // Start called, first probe not done
	StateStandby  State = "standby"  // someone else (or no one reachable) holds the lock
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
	cfg       Config
	lockCfg   *pgx.ConnConfig
	listenCfg *pgx.ConnConfig
	holder    string
	hostname  string
	pid       int

	runnables []namedRunnable

	leader atomic.Bool
	term   atomic.Int64

	mu     sync.Mutex
	status Status

	wake    chan struct{}
	started bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
	stop    sync.Once

	mIsLeader    prometheus.Gauge
	mTerm        prometheus.Gauge
	mTransitions *prometheus.CounterVec
}

type namedRunnable struct {
	name string
	fn   Runnable
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
		cfg:      cfg,
		holder:   fmt.Sprintf("ferry-leader:%s:%d", hostname, pid),
		hostname: hostname,
		pid:      pid,
		wake:     make(chan struct{}, 1),
		done:     make(chan struct{}),
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
	if e.listenCfg, err = e.connConfig(fmt.Sprintf("ferry-standby:%s:%d", hostname, pid), false); err != nil {
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
		return nil, fmt.Errorf("election: database URL: %s", dburl.Redact(err.Error()))
	}
	cc := pc.ConnConfig
	cc.RuntimeParams["application_name"] = appName
	keepIdle := max(1, int(e.cfg.Tick.Seconds()))
	cc.RuntimeParams["tcp_keepalives_idle"] = strconv.Itoa(keepIdle)
	cc.RuntimeParams["tcp_keepalives_interval"] = strconv.Itoa(max(1, keepIdle/3))
	cc.RuntimeParams["tcp_keepalives_count"] = "3"
	if lock {
		cc.RuntimeParams["statement_timeout"] = strconv.FormatInt(e.cfg.TickTimeout.Milliseconds(), 10)
	}
	dialer := &net.Dialer{
		Timeout: 10 * time.Second,
		KeepAliveConfig: net.KeepAliveConfig{
			Enable: true, Idle: time.Duration(keepIdle) * time.Second,
			Interval: time.Duration(max(1, keepIdle/3)) * time.Second, Count: 3,
		},
	}
	cc.DialFunc = dialer.DialContext
	cc.ConnectTimeout = 10 * time.Second
	return cc, nil
}

// Register adds a runnable. It must be called before Start.
func (e *Elector) Register(name string, fn Runnable) {
	if e.started {
		panic("election: Register called after Start")
	}
	e.runnables = append(e.runnables, namedRunnable{name: name, fn: fn})
}

// IsLeader reports whether this process leads now: it holds the lock, its
// latest tick confirmed it, and its runnables run.
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
	e.status.LastError = dburl.Redact(err.Error())
}

// Start begins campaigning in the background and returns at once: an
// unreachable database delays leadership, never the caller. Cancelling ctx
// resigns like Stop, but only Stop waits for the resignation to finish.
func (e *Elector) Start(ctx context.Context) error {
	if e.started {
		return errors.New("election: Start called twice")
	}
	e.started = true
	ctx, e.cancel = context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { e.listen(ctx) })
	wg.Go(func() { e.run(ctx) })
	go func() { wg.Wait(); close(e.done) }()
	return nil
}

// Stop resigns gracefully if leading (runnables stopped, term stamped
// resigned, lock released, standbys notified) and waits for the elector to
// finish. Safe to call twice, and without Start.
func (e *Elector) Stop() {
	e.stop.Do(func() {
		if !e.started {
			return
		}
		e.cancel(errResigning)
		<-e.done
	})
}

func (e *Elector) log() *slog.Logger {
	return e.cfg.Logger.With("key", e.cfg.Key, "pid", e.pid)
}

// run is the state machine's loop: probe, lead until loss or stop, repeat.
func (e *Elector) run(ctx context.Context) {
	defer e.setState(StateStopped, 0, 0)
	boot := true
	for {
		conn, backendPID, err := e.tryAcquire(ctx)
		if ctx.Err() != nil {
			if conn != nil {
				e.release(conn, 0)
			}
			return
		}
		e.setError(err)
		if err != nil {
			e.log().Warn("election: probe failed; staying standby", "error", dburl.Redact(err.Error()))
		}
		if conn != nil {
			e.lead(ctx, conn, backendPID, boot)
			if ctx.Err() != nil {
				return
			}
			// A notice that arrived while leading is stale.
			select {
			case <-e.wake:
			default:
			}
			// Demoted, or the term could not be recorded: wait a probe
			// interval like any standby, so a persistent failure cannot spin.
		}
		if st := e.Status().State; st != StateStandby {
			e.setState(StateStandby, 0, 0)
			e.mTransitions.WithLabelValues("standby").Inc()
			e.log().Info("election: standby", "probe", e.cfg.Probe)
		}
		boot = false
		t := time.NewTimer(e.cfg.Probe)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		case <-e.wake:
			t.Stop()
		}
	}
}

// tryAcquire opens a fresh lock connection and tries the lock on it (a
// session that already holds the lock would re-enter it, so probes never
// reuse one). It returns the connection when the lock is held.
func (e *Elector) tryAcquire(ctx context.Context) (*pgx.Conn, int, error) {
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
	// long. idle_session_timeout exists from Postgres 14 on.
	lease := 3*e.cfg.Tick + e.cfg.TickTimeout
	if _, err := conn.Exec(cctx, "SET idle_session_timeout = "+strconv.FormatInt(lease.Milliseconds(), 10)); err != nil {
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42704" {
			return fail(fmt.Errorf("set idle_session_timeout: %w", err))
		}
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
		return fail(nil)
	}
	// Confirm through pg_locks, as every tick will: fails closed if the lock
	// is not where we think it is.
	if err := e.check(ctx, conn); err != nil {
		e.release(conn, 0)
		return nil, 0, fmt.Errorf("confirm lock: %w", err)
	}
	return conn, pidAfter, nil
}

const ownershipSQL = `SELECT 1 FROM pg_locks
WHERE locktype = 'advisory' AND classid = $1::bigint::oid AND objid = $2::bigint::oid AND objsubid = 1
  AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND pid = pg_backend_pid()`

// check is the leader tick: one query on the lock connection, bounded by
// TickTimeout. No row, an error or a timeout all mean the lock is lost.
func (e *Elector) check(ctx context.Context, conn *pgx.Conn) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TickTimeout)
	defer cancel()
	hi, lo := lockParts(e.cfg.Key)
	var one int
	err := conn.QueryRow(ctx, ownershipSQL, hi, lo).Scan(&one)
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

const beginTermSQL = `WITH prev AS (
    SELECT term, resigned_at IS NOT NULL AS resigned FROM ferry_leader_term
    WHERE key = $1 ORDER BY term DESC LIMIT 1
), ins AS (
    INSERT INTO ferry_leader_term (key, holder, hostname, pid, backend_pid)
    VALUES ($1, $2, $3, $4, pg_backend_pid())
    RETURNING term
)
SELECT ins.term, prev.term, coalesce(prev.resigned, false) FROM ins LEFT JOIN prev ON true`

// lead holds leadership on conn until the lock is lost or ctx ends.
func (e *Elector) lead(ctx context.Context, conn *pgx.Conn, backendPID int, boot bool) {
	var (
		term     int64
		prevTerm *int64
		resigned bool
	)
	tctx, cancel := context.WithTimeout(ctx, e.cfg.TickTimeout)
	err := conn.QueryRow(tctx, beginTermSQL, e.cfg.Key, e.holder, e.hostname, e.pid).Scan(&term, &prevTerm, &resigned)
	cancel()
	if err != nil {
		// Fail closed: no term, no runnables. Let another process try.
		e.setError(err)
		e.log().Error("election: could not record the term; releasing the lock", "error", dburl.Redact(err.Error()))
		e.release(conn, 0)
		return
	}
	e.term.Store(term)
	e.mTerm.Set(float64(term))
	deferStart := !resigned
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
		// The predecessor did not resign (crash, killed connection, no
		// record): it may still be running its runnables until its next
		// tick. Wait that tick and its timeout out before starting anything.
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
	var sup *supervisor
	stopRunnables := func(cause error) {
		if sup != nil {
			e.leader.Store(false)
			e.mIsLeader.Set(0)
			sup.stop(cause, e.cfg.Tick)
			sup = nil
		}
	}
	for {
		select {
		case <-ctx.Done():
			stopRunnables(errResigning)
			e.release(conn, term)
			return
		case <-deferC:
			deferC = nil
			if err := e.check(ctx, conn); err != nil {
				e.demote(conn, term, err)
				return
			}
			if err := e.markStarted(ctx, conn, term); err != nil {
				e.demote(conn, term, err)
				return
			}
			sup = e.startRunnables()
			e.leader.Store(true)
			e.mIsLeader.Set(1)
			e.mTransitions.WithLabelValues("leader").Inc()
			e.setState(StateLeader, term, backendPID)
			e.log().Info("election: runnables started", "term", term, "runnables", len(e.runnables))
		case <-ticker.C:
			if err := e.check(ctx, conn); err != nil {
				if ctx.Err() != nil {
					continue // stopping; the ctx case resigns
				}
				stopRunnables(errDemoted)
				e.demote(conn, term, err)
				return
			}
		}
	}
}

func (e *Elector) markStarted(ctx context.Context, conn *pgx.Conn, term int64) error {
	ctx, cancel := context.WithTimeout(ctx, e.cfg.TickTimeout)
	defer cancel()
	_, err := conn.Exec(ctx, "UPDATE ferry_leader_term SET started_at = now() WHERE term = $1", term)
	if err != nil {
		return fmt.Errorf("stamp term start: %w", err)
	}
	return nil
}

// demote ends a term that was lost: the runnables are already stopped.
func (e *Elector) demote(conn *pgx.Conn, term int64, reason error) {
	closeQuietly(conn)
	e.term.Store(0)
	e.mTerm.Set(0)
	e.mTransitions.WithLabelValues("demoted").Inc()
	e.setError(reason)
	e.setState(StateStandby, 0, 0)
	e.log().Warn("election: demoted", "term", term, "reason", dburl.Redact(reason.Error()))
}

// release resigns a term (when term > 0): stamp resigned_at, unlock, notify
// standbys, close. It runs under its own timeout, whatever ctx did.
func (e *Elector) release(conn *pgx.Conn, term int64) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if term > 0 {
		if _, err := conn.Exec(ctx, "UPDATE ferry_leader_term SET resigned_at = now(), ended_reason = 'resigned' WHERE term = $1", term); err != nil {
			errs = append(errs, fmt.Errorf("stamp resignation: %w", err))
		}
	}
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_unlock($1)", e.cfg.Key); err != nil {
		errs = append(errs, fmt.Errorf("unlock: %w", err))
	}
	if term > 0 {
		if _, err := conn.Exec(ctx, "SELECT pg_notify($1, $2)", ResignChannel, strconv.FormatInt(e.cfg.Key, 10)); err != nil {
			errs = append(errs, fmt.Errorf("notify standbys: %w", err))
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
		// Closing the connection released the lock anyway; standbys find it
		// at their next probe and, the term unstamped, defer their start.
		e.log().Warn("election: resigned uncleanly", "term", term, "error", dburl.Redact(err.Error()))
		return
	}
	e.log().Info("election: resigned", "term", term)
}

func closeQuietly(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = conn.Close(ctx)
}

// listen keeps a LISTEN session on ResignChannel and wakes the probe loop
// when a leader of this key resigns (and on every reconnect: a resignation
// may have happened while the session was down).
func (e *Elector) listen(ctx context.Context) {
	want := strconv.FormatInt(e.cfg.Key, 10)
	pglisten.Run(ctx, pglisten.Config{
		ConnConfig:  e.listenCfg,
		Channel:     ResignChannel,
		OnListening: e.poke,
		OnNotify: func(n *pgconn.Notification) {
			if n.Payload == want && !e.leader.Load() {
				e.poke()
			}
		},
		MaxBackoff: e.cfg.Probe,
		Logger:     e.log(),
		Name:       "election: resignation listener",
	})
}

func (e *Elector) poke() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// supervisor runs the runnables of one term.
type supervisor struct {
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
	log    *slog.Logger
}

func (e *Elector) startRunnables() *supervisor {
	ctx, cancel := context.WithCancelCause(context.Background())
	s := &supervisor{cancel: cancel, log: e.log()}
	for _, r := range e.runnables {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
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
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(backoff*2, 30*time.Second)
			}
		}()
	}
	return s
}

// stop cancels the runnables and waits up to wait for them to return.
func (s *supervisor) stop(cause error, wait time.Duration) {
	s.cancel(cause)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		s.log.Error("election: runnables still running after their context was cancelled", "waited", wait)
	}
}

// sleep waits d, or until ctx is done; it reports whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func runSafely(ctx context.Context, fn Runnable) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v\n%s", r, debug.Stack())
		}
	}()
	return fn(ctx)
}

// Fence checks, inside tx, that this process holds the newest term of its
// key. Leader-only writes call it (and record Term()) so that a stale leader
// cannot write after a newer term began.
func (e *Elector) Fence(ctx context.Context, tx pgx.Tx) error {
	term := e.Term()
	if !e.IsLeader() || term == 0 {
		return ErrNotLeader
	}
	var newest int64
	if err := tx.QueryRow(ctx, "SELECT coalesce(max(term), 0) FROM ferry_leader_term WHERE key = $1", e.cfg.Key).Scan(&newest); err != nil {
		return fmt.Errorf("election: fence: %w", err)
	}
	if newest != term {
		return fmt.Errorf("%w: term %d superseded by %d", ErrNotLeader, term, newest)
	}
	return nil
}
