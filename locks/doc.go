// Package locks gives named locks on Postgres: one holder at a time across
// every process and container that shares the database, with a fencing
// token.
//
// # Use
//
//	c := locks.New(pool, locks.Config{})
//	l, err := c.Acquire(ctx, "nightly-report", locks.Options{TTL: time.Minute, Wait: 10 * time.Second})
//	if errors.Is(err, locks.ErrNotAcquired) { … } // another holder; err names it
//	defer l.Release(context.WithoutCancel(ctx))
//	ctx := l.Context()           // ends, with cause locks.ErrLost, if the lock is lost
//	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
//	    if err := l.Fence(ctx, tx); err != nil { return err } // a stale holder's write fails
//	    … writes …
//	})
//
// # Table and tokens
//
// ferry_lock (contract) has a row per name: name (1 to 128 letters, digits
// and _.:-, checked by the database), token, holder, acquired_at, expires_at.
// An acquisition is one statement that takes the row only when it is new or
// its expires_at has passed by the database's clock (clock_timestamp()), and
// adds one to token. An attempt on a held lock only reads: it locks no row
// and writes nothing, so the waiters a release wakes, and their polls,
// never make the holder's fences or release wait, nor wait for them. A
// free lock's row is locked FOR UPDATE SKIP LOCKED: an attempt that finds
// it locked by another transaction (an acquisition committing, a fenced
// transaction of a holder whose lease ran out) tries again, backing off
// from 1 to 20 ms. Rows are kept after release (expires_at is set to the
// database's clock), so a name's token grows strictly with each acquisition:
// it is the fencing token. No server clock is read: expiry is the database's,
// and the holder measures only durations on its own monotonic clock.
//
// # Renewal and loss
//
// A Lock renews itself every TTL/3 (an UPDATE that matches its own token and
// an unexpired row; retried every TTL/10 after an error). Only the holder
// renews or releases: both match the token. The holder treats the lock as
// lost at start of its last good renewal + TTL − TTL/5: the database set
// the expiry after that start, so the holder stops acting a fifth of the ttl
// before the database can give the lock to someone else, whatever the clocks
// say. A renewal that finds the row taken loses it at once. On loss, Held()
// turns false, Lost() closes, Context() ends with cause ErrLost, and Release
// returns ErrLost.
//
// Expiry() is the soonest moment the database can give the lock to another
// holder, on the holder's monotonic clock: the start of the last good
// renewal + TTL (the moment the renewal ended, once a renewal found the lock
// taken). Whoever acts for the holder must have stopped by then: enqueue
// lock run sends its command SIGTERM on loss and SIGKILL after half the
// time left before Expiry.
//
// That is advisory: a holder paused longer than the margin (a GC pause, a
// stopped process) can act after its lock is gone. Only the fencing token
// guarantees exclusion of effects. Fence closes that gap for
// writes to the same database: called in the holder's transaction, it locks
// the lock's row FOR SHARE and checks that the token is still current and
// unexpired, so a newer acquisition waits for that transaction to end, and a
// stale holder's fenced write fails (ErrLost). Writes fenced by successive
// holders commit in token order.
//
// # Waiting
//
// Options.Wait 0 tries once; a positive Wait keeps trying; Forever waits
// until ctx ends. A waiter LISTENs on channel ferry_lock on a connection of
// its own before its first try; a release NOTIFYs the lock's name in the
// same statement, so a waiter tries again at once, not at a poll. It also
// tries when the holder's expiry comes (a dead holder sends nothing): 20 ms
// before it, with a statement that waits in the database for the expiry in
// the round trip of the attempt, so the attempt is made at the expiry by
// the database's clock whatever the waiter's wake-up costs on a busy host
// (while it waits, at most 40 ms, the waiter hears no release). And it
// tries every Config.PollInterval (a notification lost while a connection
// was down).
// When the wait runs out Acquire returns a *HeldError naming the holder
// (errors.Is ErrNotAcquired), or ErrNotAcquired alone when no attempt saw
// a holder (the free lock's row stayed locked by another transaction, or
// the wait was shorter than the first attempt).
//
// # Failures
//
// When Postgres cannot be reached Acquire returns ErrUnavailable: nobody can
// tell who holds the lock. A holder that cannot renew loses the lock at its
// deadline, before the database's expiry. Waiting and renewal need a session
// (LISTEN): a direct connection or a session-mode pooler.
//
// # Module
//
// locks is a Go module of its own (github.com/ferryq/ferry/locks), like
// jobs, outbox, seal and broadcast: a service that requires it gets River
// and pgx in its module graph, never the worker's requirements (River UI,
// Prometheus, OpenTelemetry, the CLI).
package locks
