package locks

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Channel is the NOTIFY channel a release signals, with the lock's name as
// the payload.
const Channel = "ferry_lock"

// Forever, as Options.Wait, waits until the lock is acquired or ctx ends.
const Forever time.Duration = -1

// DefaultTTL is the ttl of Options that give none.
const DefaultTTL = 30 * time.Second

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

// ValidName reports whether name is 1 to 128 letters, digits and _.:-.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// Observer is told of acquisitions, releases and losses (ferry's metrics
// implement it). Its methods must not block.
type Observer interface {
	Acquired(name string)
	Released(name string)
	Lost(name string)
}

// Config configures a Client.
type Config struct {
	// Holder names this process in ferry_lock.holder (default
	// hostname:pid).
	Holder string
	// PollInterval bounds how long a waiter sleeps between attempts when no
	// notification comes (a notification sent while its listening
	// connection was down is lost). Default 5s. Waiters also wake when the
	// holder's lock expires.
	PollInterval time.Duration
	// Observer, if set, is told of acquisitions, releases and losses.
	Observer Observer
}

// Client acquires named locks in one database.
type Client struct {
	pool   *pgxpool.Pool
	holder string
	poll   time.Duration
	obs    Observer
}

// New returns a Client on pool. pool needs session semantics for waiting
// (LISTEN): a direct connection or a session-mode pooler.
func New(pool *pgxpool.Pool, cfg Config) *Client {
	holder := cfg.Holder
	if holder == "" {
		host, _ := os.Hostname()
		holder = fmt.Sprintf("%s:%d", cmp.Or(host, "unknown"), os.Getpid())
	}
	if len(holder) > 256 {
		holder = holder[:256]
	}
	return &Client{pool: pool, holder: holder, poll: cmp.Or(cfg.PollInterval, 5*time.Second), obs: cfg.Observer}
}

// Options of one acquisition.
type Options struct {
	// TTL is how long the lock lives without renewal (default DefaultTTL;
	// at least 100ms). The Lock renews it every TTL/3.
	TTL time.Duration
	// Wait is how long Acquire waits for a held lock: 0 tries once,
	// Forever waits until ctx ends.
	Wait time.Duration
}

const (
	// sqlAcquire takes the lock when its row is new or expired, and
	// otherwise returns the holder as the statement's snapshot has it, in
	// one round trip.
	//
	// An attempt on a held lock only reads: it locks no row, takes no
	// transaction id and writes no WAL, so it waits for no commit flush
	// and for no fenced transaction of the holder (Wait 0 answers at
	// once), and the holder's fences and release never wait for it. The
	// UPSERT this statement replaced (INSERT … ON CONFLICT DO UPDATE …
	// WHERE expired) locked the row before it evaluated its WHERE: every
	// failed attempt and every poll was a write with its own flush, and the
	// waiters a release woke queued on the row one after another.
	//
	// A free lock's row is locked FOR UPDATE SKIP LOCKED: an attempt that
	// finds another transaction holding it (an acquisition about to
	// commit, or a fenced transaction of a holder whose lease ran out)
	// skips it and returns no row: try reads the holder again and retries.
	// Under the row lock the expiry is checked again on the newest version
	// and the clock read again, so one attempt takes the lock, and a
	// fenced write still commits before any newer token exists.
	sqlAcquire = `WITH free AS (
    SELECT name FROM ferry_lock
    WHERE name = $1 AND expires_at <= clock_timestamp()
    FOR UPDATE SKIP LOCKED),
taken AS (
    UPDATE ferry_lock AS l
    SET token = l.token + 1, holder = $2, acquired_at = clock_timestamp(),
        expires_at = clock_timestamp() + $3 * interval '1 microsecond'
    FROM free WHERE l.name = free.name AND l.expires_at <= clock_timestamp()
    RETURNING l.name, l.token, l.holder, l.acquired_at, l.expires_at),
created AS (
    -- A name's first acquisition; DO NOTHING locks no row either.
    INSERT INTO ferry_lock (name, token, holder, acquired_at, expires_at)
    SELECT $1, 1, $2, clock_timestamp(), clock_timestamp() + $3 * interval '1 microsecond'
    WHERE NOT EXISTS (SELECT 1 FROM ferry_lock WHERE name = $1)
    ON CONFLICT (name) DO NOTHING
    RETURNING name, token, holder, acquired_at, expires_at),
acquired AS (SELECT * FROM taken UNION ALL SELECT * FROM created)
SELECT true, name, token, holder, acquired_at, expires_at, 0::bigint FROM acquired
UNION ALL
SELECT false, name, token, holder, acquired_at, expires_at,
    (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM ferry_lock WHERE name = $1 AND expires_at > clock_timestamp() AND NOT EXISTS (SELECT 1 FROM acquired)`

	sqlHolder = `SELECT name, token, holder, acquired_at, expires_at,
    (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM ferry_lock WHERE name = $1 AND expires_at > clock_timestamp()`

	sqlList = `SELECT name, token, holder, acquired_at, expires_at,
    (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
FROM ferry_lock WHERE expires_at > clock_timestamp() ORDER BY name`

	sqlRenew = `UPDATE ferry_lock SET expires_at = clock_timestamp() + $3 * interval '1 microsecond'
WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()
RETURNING token`

	sqlRelease = `WITH r AS (
    UPDATE ferry_lock SET expires_at = clock_timestamp()
    WHERE name = $1 AND token = $2 AND expires_at > clock_timestamp()
    RETURNING name)
SELECT pg_notify('` + Channel + `', name) FROM r`

	sqlFence = `SELECT token, expires_at > clock_timestamp() FROM ferry_lock WHERE name = $1 FOR SHARE`

	// sqlAwaitExpiry sleeps until the holder's expiry when it is at most $2
	// seconds away (not at all otherwise: a holder that renewed). Sent in
	// the round trip of sqlAcquire, it makes the attempt at the expiry by
	// the database's clock, whatever the waiter's wake-up costs.
	sqlAwaitExpiry = `SELECT pg_sleep(CASE WHEN s.remaining <= $2::float8 THEN s.remaining ELSE 0 END)
FROM (SELECT extract(epoch FROM expires_at - clock_timestamp())::float8 AS remaining
      FROM ferry_lock WHERE name = $1) s`
)

// expiryLead is how long before a holder's expiry a waiter sends the
// attempt that waits for it in the database (sqlAwaitExpiry). Waking in the
// process at the expiry instead makes the attempt late by the wake-up: a
// timer, a busy CPU, the round trip, several milliseconds on a loaded host.
// While that attempt waits (at most 2×expiryLead) the waiter hears no
// release: a holder that releases just before its expiry hands over at the
// expiry.
const expiryLead = 20 * time.Millisecond

// Acquire takes the lock name for opts.TTL, waiting up to opts.Wait while
// another holder has it. It returns a *HeldError (ErrNotAcquired) naming
// the holder when the wait runs out (ErrNotAcquired without a holder when
// no attempt saw one: the free lock's row stayed locked by another
// transaction, such as a fenced write of a holder whose lease ran out, or
// the wait was shorter than the first attempt),
// ErrUnavailable when Postgres cannot be reached, ErrInvalidName for a bad
// name, or ctx's error.
func (c *Client) Acquire(ctx context.Context, name string, opts Options) (*Lock, error) {
	if !ValidName(name) {
		return nil, fmt.Errorf("%w: %q: use 1 to 128 letters, digits and _.:-", ErrInvalidName, name)
	}
	ttl := cmp.Or(opts.TTL, DefaultTTL)
	if ttl < 100*time.Millisecond {
		return nil, fmt.Errorf("locks: ttl %s is under 100ms", ttl)
	}
	if opts.Wait == 0 {
		start := time.Now()
		token, held, err := c.try(ctx, c.pool, name, ttl, false)
		if err != nil {
			return nil, err
		}
		if held != nil {
			return nil, &HeldError{Holder: *held}
		}
		return c.newLock(name, token, ttl, start), nil
	}
	return c.wait(ctx, name, ttl, opts.Wait)
}

type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

// try makes one attempt: the token on success, or the current holder.
// atExpiry makes the database start the attempt at the holder's expiry
// when that is near (sqlAwaitExpiry, in the same round trip).
func (c *Client) try(ctx context.Context, q querier, name string, ttl time.Duration, atExpiry bool) (int64, *Holder, error) {
	var backoff time.Duration // between attempts on a free lock's locked row
	for {
		var (
			ok bool
			h  Holder
			us int64
		)
		dest := []any{&ok, &h.Name, &h.Token, &h.Holder, &h.AcquiredAt, &h.ExpiresAt, &us}
		var err error
		if atExpiry {
			b := &pgx.Batch{}
			b.Queue(sqlAwaitExpiry, name, (2 * expiryLead).Seconds())
			b.Queue(sqlAcquire, name, c.holder, ttl.Microseconds()).
				QueryRow(func(row pgx.Row) error { return row.Scan(dest...) })
			err = q.SendBatch(ctx, b).Close()
			atExpiry = false
		} else {
			err = q.QueryRow(ctx, sqlAcquire, name, c.holder, ttl.Microseconds()).Scan(dest...)
		}
		switch {
		case err == nil && ok:
			return h.Token, nil, nil
		case err == nil:
			h.ExpiresIn = time.Duration(us) * time.Microsecond
			return 0, &h, nil
		case !errors.Is(err, pgx.ErrNoRows):
			return 0, nil, translate(ctx, "acquire "+name, err)
		}
		// Not acquired, and the snapshot has no live holder: a holder
		// committed after it, or another transaction has the free lock's
		// row locked (an acquisition committing, a fenced transaction of
		// a holder whose lease ran out). Read the holder afresh.
		held, err := holderOf(ctx, q, name)
		if err != nil {
			return 0, nil, translate(ctx, "read the holder of "+name, err)
		}
		if held != nil {
			return 0, held, nil
		}
		// Still free and locked: the other transaction has not ended. An
		// acquisition commits within a millisecond or so; a fenced
		// transaction takes as long as its writer does. Retry once at
		// once, then back off from 1 ms to skipBackoffMax rather than spin.
		if backoff > 0 {
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return 0, nil, context.Cause(ctx)
			case <-t.C:
			}
		}
		backoff = min(max(2*backoff, time.Millisecond), skipBackoffMax)
	}
}

// skipBackoffMax caps the pause between attempts on a free lock whose row
// another transaction holds: a fenced transaction of a holder whose lease
// ran out delays the next holder by at most this much after it ends.
const skipBackoffMax = 20 * time.Millisecond

func holderOf(ctx context.Context, q querier, name string) (*Holder, error) {
	rows, err := q.Query(ctx, sqlHolder, name)
	if err != nil {
		return nil, err
	}
	hs, err := scanHolders(rows)
	if err != nil || len(hs) == 0 {
		return nil, err
	}
	return &hs[0], nil
}

func scanHolders(rows pgx.Rows) ([]Holder, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Holder, error) {
		var (
			h  Holder
			us int64
		)
		err := row.Scan(&h.Name, &h.Token, &h.Holder, &h.AcquiredAt, &h.ExpiresAt, &us)
		h.ExpiresIn = time.Duration(us) * time.Microsecond
		return h, err
	})
}

// wait listens for releases on a connection of its own, then tries until
// the lock is free, the wait runs out or ctx ends. A try follows each
// notification for name, the holder's expiry (sent expiryLead before it,
// the database waits for it), and every PollInterval.
func (c *Client) wait(ctx context.Context, name string, ttl, wait time.Duration) (_ *Lock, err error) {
	var last *Holder // the holder the last attempt saw
	if wait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, wait, errWaitOver)
		defer cancel()
		// Whatever step the wait ran out in (taking a connection, LISTEN,
		// an attempt, the sleep between two), the error is waitOver's:
		// the last holder seen, or the lock's name and why none was.
		defer func() {
			if err != nil && errors.Is(context.Cause(ctx), errWaitOver) {
				err = waitOver(name, last)
			}
		}()
	}
	conn, err := c.pool.Acquire(ctx)
	if err != nil {
		return nil, translate(ctx, "acquire "+name, err)
	}
	defer func() {
		// A connection given back must not keep listening.
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, "UNLISTEN "+Channel); err != nil {
			_ = conn.Conn().Close(uctx)
		}
		conn.Release()
	}()
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return nil, translate(ctx, "listen for releases of "+name, err)
	}
	atExpiry := false // the next try waits in the database for the expiry
	for {
		start := time.Now() // the lock's deadline counts from here
		token, held, err := c.try(ctx, conn, name, ttl, atExpiry)
		if err != nil {
			return nil, err
		}
		if held == nil {
			return c.newLock(name, token, ttl, start), nil
		}
		last = held
		// Sleep until a release of name, the poll, or expiryLead before the
		// holder's expiry, when the next try waits for the expiry. An
		// expiry less than two polls away is halved to: a poll's sleep could
		// wake too near it for the next try to be the one at the expiry.
		untilExpiry := held.ExpiresIn - expiryLead
		sleep := c.poll
		atExpiry = untilExpiry <= c.poll
		switch {
		case atExpiry:
			sleep = untilExpiry
		case untilExpiry < 2*c.poll:
			sleep = untilExpiry / 2
		}
		if sleep <= 0 {
			continue
		}
		notified, err := awaitRelease(ctx, conn.Conn(), name, sleep)
		if notified {
			atExpiry = false
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil, context.Cause(ctx)
			}
			return nil, translate(ctx, "wait for "+name, err)
		}
	}
}

// waitOver is Acquire's error when its wait ran out: the last holder it
// saw, or, when no attempt saw one, ErrNotAcquired saying why that can be
// (the free lock's row stayed locked while try backed off, or the wait was
// shorter than the first attempt, or than taking a connection for it).
func waitOver(name string, last *Holder) error {
	if last != nil {
		return &HeldError{Holder: *last}
	}
	return fmt.Errorf("%w: %s: the wait ran out before any attempt saw a live holder or took the lock (was its row locked by another transaction, a fenced write of a holder whose lease ran out?)", ErrNotAcquired, name)
}

// errWaitOver ends a positive Wait; it is ErrNotAcquired, for the paths
// where no attempt has answered yet.
var errWaitOver = fmt.Errorf("%w: the wait ran out", ErrNotAcquired)

// awaitRelease returns when a notification for name arrives (true) or d
// passes (false), or with ctx's or the connection's error.
func awaitRelease(ctx context.Context, conn *pgx.Conn, name string, d time.Duration) (bool, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		n, err := conn.WaitForNotification(wctx)
		if err != nil {
			if ctx.Err() == nil && wctx.Err() != nil {
				return false, nil // d passed
			}
			return false, err
		}
		if n.Payload == name {
			return true, nil
		}
	}
}

// translate makes a connection failure ErrUnavailable and names the
// operation; errors of the database itself (a missing table, a check) and
// of ctx stay what they are.
func translate(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		if pgErr.Code == "23514" {
			return fmt.Errorf("%w: %s: %s", ErrInvalidName, op, pgErr.Message)
		}
		if pgErr.Code == "42P01" {
			return fmt.Errorf("locks: %s: table ferry_lock is missing: run `worker migrate up`: %w", op, err)
		}
		return fmt.Errorf("locks: %s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// List returns the locks held now (unexpired by the database's clock), by
// name.
func (c *Client) List(ctx context.Context) ([]Holder, error) { return List(ctx, c.pool) }

// List returns the locks held now in the database q is connected to.
func List(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}) ([]Holder, error) {
	rows, err := q.Query(ctx, sqlList)
	if err != nil {
		return nil, translate(ctx, "list locks", err)
	}
	hs, err := scanHolders(rows)
	if err != nil {
		return nil, translate(ctx, "list locks", err)
	}
	return hs, nil
}

// Fence checks, inside tx, that token is the current, unexpired token of
// name, and keeps it so until tx ends: it locks the lock's row FOR SHARE,
// so a newer acquisition (and a renewal) waits for tx to end. A write made
// in tx after Fence succeeded commits before any newer holder gets the
// lock, or not at all. It returns an error wrapping ErrLost when the token
// is stale or expired.
//
// Under READ COMMITTED the row lock reads the newest committed version; under
// REPEATABLE READ or SERIALIZABLE a concurrent acquisition makes it fail
// with a serialization error instead. Keep fenced transactions short: the
// holder's own renewals wait for them too.
func Fence(ctx context.Context, tx pgx.Tx, name string, token int64) error {
	var (
		current int64
		live    bool
	)
	switch err := tx.QueryRow(ctx, sqlFence, name).Scan(&current, &live); {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s was never acquired", ErrLost, name)
	case err != nil:
		return translate(ctx, "fence "+name, err)
	case current != token:
		return fmt.Errorf("%w: %s: token %d superseded by %d", ErrLost, name, token, current)
	case !live:
		return fmt.Errorf("%w: %s: token %d expired or released", ErrLost, name, token)
	}
	return nil
}

// Lock is one acquisition of a named lock. Its goroutine renews it every
// TTL/3 until Release or loss.
type Lock struct {
	c     *Client
	name  string
	token int64
	ttl   time.Duration

	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{} // the renewer has returned

	mu       sync.Mutex
	expiry   time.Time // local: the soonest the database can give the lock away
	deadline time.Time // local: past it, the lock is treated as lost
	ended    error     // ErrLost or ErrReleased once ended
	release  chan struct{}
}

// margin is how long before the server's expiry a holder whose renewals
// fail stops acting: deadline = start of the last good renewal + ttl -
// margin. Durations only, measured on this process's monotonic clock from
// a moment before the database read its own clock, so no clock needs to
// agree with another.
func margin(ttl time.Duration) time.Duration { return ttl / 5 }

func (c *Client) newLock(name string, token int64, ttl time.Duration, start time.Time) *Lock {
	ctx, cancel := context.WithCancelCause(context.Background())
	l := &Lock{
		c: c, name: name, token: token, ttl: ttl,
		ctx: ctx, cancel: cancel, done: make(chan struct{}),
		expiry:   start.Add(ttl),
		deadline: start.Add(ttl - margin(ttl)),
		release:  make(chan struct{}),
	}
	if c.obs != nil {
		c.obs.Acquired(name)
	}
	go l.renew()
	return l
}

// Name is the lock's name.
func (l *Lock) Name() string { return l.name }

// Token is this acquisition's fencing token: larger than every earlier
// acquisition's of the same name.
func (l *Lock) Token() int64 { return l.token }

// TTL is the lock's ttl.
func (l *Lock) TTL() time.Duration { return l.ttl }

// Held reports whether the lock is still held: not released, not lost, and
// renewed recently enough that the database cannot have expired it.
func (l *Lock) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ended == nil && time.Now().Before(l.deadline)
}

// Expiry is the soonest moment, on this process's monotonic clock, at which
// the database can give the lock to another holder: the start of the last
// good renewal (or of the acquisition) plus the ttl. The lock is treated as
// lost a fifth of the ttl before it. After a renewal found the lock taken,
// Expiry is the moment that renewal ended: another holder may act already.
// Whoever acts for the holder (a child process) must have stopped by then.
func (l *Lock) Expiry() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.expiry
}

// Lost returns a channel closed when the lock ends: lost or released.
func (l *Lock) Lost() <-chan struct{} { return l.ctx.Done() }

// Context returns a context that ends when the lock ends, with cause
// ErrLost or ErrReleased (context.Cause).
func (l *Lock) Context() context.Context { return l.ctx }

// Fence checks inside tx that this lock is still held and its token
// current (see the package function Fence).
func (l *Lock) Fence(ctx context.Context, tx pgx.Tx) error {
	if !l.Held() {
		return fmt.Errorf("%w: %s: token %d", ErrLost, l.name, l.token)
	}
	return Fence(ctx, tx, l.name, l.token)
}

// Release gives the lock up and wakes the waiters. It returns an error
// wrapping ErrLost if the lock had been lost, and is a no-op the second
// time. After Release the Lock's context ends with ErrReleased.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	if l.ended != nil {
		ended := l.ended
		l.mu.Unlock()
		<-l.done
		if errors.Is(ended, ErrLost) {
			return fmt.Errorf("%w: %s: token %d", ErrLost, l.name, l.token)
		}
		return nil
	}
	l.ended = ErrReleased
	close(l.release)
	l.mu.Unlock()
	<-l.done
	l.cancel(ErrReleased)
	if l.c.obs != nil {
		l.c.obs.Released(l.name)
	}
	rows, err := l.c.pool.Query(ctx, sqlRelease, l.name, l.token)
	if err != nil {
		return translate(ctx, "release "+l.name, err)
	}
	n := 0
	for rows.Next() {
		n++
	}
	if err := rows.Err(); err != nil {
		return translate(ctx, "release "+l.name, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s: token %d had expired or was superseded", ErrLost, l.name, l.token)
	}
	return nil
}

// renew extends the lock every ttl/3; after a failed renewal it tries
// again every ttl/10, until the local deadline passes (lost) or a renewal
// finds that the database gave the lock to someone else (lost at once).
func (l *Lock) renew() {
	defer close(l.done)
	every := l.ttl / 3
	retry := l.ttl / 10
	next := every
	for {
		t := time.NewTimer(next)
		l.mu.Lock()
		deadline := l.deadline
		l.mu.Unlock()
		lose := time.NewTimer(time.Until(deadline))
		select {
		case <-l.release:
			t.Stop()
			lose.Stop()
			return
		case <-lose.C:
			t.Stop()
			l.lose()
			return
		case <-t.C:
			lose.Stop()
		}
		start := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		var token int64
		err := l.c.pool.QueryRow(ctx, sqlRenew, l.name, l.token, l.ttl.Microseconds()).Scan(&token)
		cancel()
		switch {
		case err == nil:
			l.mu.Lock()
			if l.ended == nil {
				l.expiry = start.Add(l.ttl)
				l.deadline = start.Add(l.ttl - margin(l.ttl))
			}
			l.mu.Unlock()
			next = every
		case errors.Is(err, pgx.ErrNoRows):
			// Taken by another holder, or expired: it may act already.
			l.mu.Lock()
			if now := time.Now(); now.Before(l.expiry) {
				l.expiry = now
			}
			l.mu.Unlock()
			l.lose()
			return
		default:
			// Unreachable, or too slow: keep trying until the deadline.
			next = retry + rand.N(retry/4+1)
		}
	}
}

func (l *Lock) lose() {
	l.mu.Lock()
	if l.ended != nil {
		l.mu.Unlock()
		return
	}
	l.ended = ErrLost
	l.mu.Unlock()
	// Counted before the context ends, so that whoever sees the end sees
	// the count.
	if l.c.obs != nil {
		l.c.obs.Lost(l.name)
	}
	l.cancel(ErrLost)
}
