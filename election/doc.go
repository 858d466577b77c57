// Package election is ferry's leader layer: one process per database holds a
// session advisory lock and runs the leader runnables (the scheduler, the
// Telegram long-polls); every other process is a standby. The leader proves
// its ownership on every tick and demotes itself the moment it cannot.
//
// # State machine
//
//	             Start
//	               │
//	               ▼
//	  ┌──────► pg_try_advisory_lock on a fresh connection ── error ──► retry after a backoff (up to Probe)
//	  │            │                     │
//	  │            │ granted             │ held by another session
//	  │            │                     ▼
//	  │            │              standby: LISTEN for a resignation; try the lock on a
//	  │            │              notice and every min(Tick, 250 ms), idle in between
//	  │            ▼                     │
//	  │     record term (ferry_leader_term) ◄──┘  (fenced runnables start here)
//	  │            │ error: unlock, back off, retry
//	  │            ├── no predecessor, or it resigned ────┐
//	  │            ▼                                      ▼
//	  │         deferred ── Tick + TickTimeout ──► stamp start, check ─► leader (runnables run)
//	  │            │                                │       │
//	  │            │ tick fails                      fails   │ tick fails: no row, error, timeout
//	  │            ▼                                ▼       ▼
//	  └──────── demoted: runnables cancelled, connection closed
//
//	Stop (any state): runnables cancelled; if they returned within a tick
//	(or the tick timeout, if longer),
//	resigned_at stamped, unlock, NOTIFY, close; otherwise, or while still
//	deferring to an unresigned predecessor, the term is left unresigned
//	("abandoned") and the connection closed.
//
// # Why a session lock on a dedicated connection
//
// A session advisory lock lives exactly as long as the session: when the
// process dies, the kernel closes its socket, the server ends the session and
// the lock is free. It must live on a connection of its own (a pgx.Conn, never
// a pooled one: a pool would hand the session, and the lock, to other code),
// opened with application_name ferry-leader:<hostname>:<pid> so that
// pg_stat_activity names the holder. The connection never leaves a
// transaction open, so the holder shows as idle, never idle in transaction,
// and no idle-transaction timeout can reap it.
//
// # Why the tick
//
// The lock can vanish while the holder lives: a Postgres restart or failover,
// pg_terminate_backend, a proxy dropping the connection. The holder learns
// nothing until it uses the connection. So the leader checks every Tick, with
// a timeout of TickTimeout, that pg_locks shows its own backend holding the
// key. No row, an error or a timeout is loss: it cancels its runnables, closes
// the connection and becomes a standby ("election: demoted"). The demotion
// waits for the runnables to return, so a runnable whose context ended for
// a loss (Demoted) must not wait on the database then: it may be out of
// reach.
//
// # Why the database predicate
//
// pg_locks is cluster-wide, and advisory keys are per database: the same key
// held in another database on the same server is another election. Every
// query on pg_locks carries database = (SELECT oid FROM pg_database WHERE
// datname = current_database()).
//
// # Why standbys do not wait in pg_advisory_lock
//
// After a failed try a standby LISTENs on ResignChannel on its own lock
// connection and tries the lock (pg_try_advisory_lock) again at once when
// a resigning leader's notice arrives, and otherwise every min(Tick,
// MaxStandbyPoll): a graceful handover takes milliseconds, and a holder
// whose session ended without a notice (kill -9, a lost node, a reaped
// partition) is replaced within a quarter second of it, which its successor's
// deferral (Tick + TickTimeout) dwarfs anyway. Probe only caps the backoff
// after a failed wait (the database unreachable, a term that could not be
// recorded).
//
// Waiting in pg_advisory_lock would hand the lock over a little sooner,
// and an earlier version did. But a statement that waits on a lock keeps
// the snapshot it began with, and a session's snapshot is the database's
// xmin horizon: for as long as the leader led, no VACUUM could remove a
// row version that died after the standby began to wait, nor an index scan
// mark such an entry dead. River's job table, whose every job is updated
// a few times, bloated without bound, and its fetch slowed with it. A
// standby idle between tries holds nothing
// (TestElector_StandbyWaitsWithoutASnapshot).
//
// # Why the deferral
//
// A new holder does not know whether its predecessor has stopped. If the
// predecessor resigned (its term has resigned_at stamped), it has: its
// runnables returned before it unlocked, and the new leader starts at once.
// The first term of a key has no predecessor and starts at once too.
// Otherwise (crash, killed connection, lost lock, runnables that would not
// stop) the predecessor may still be running its runnables until its next
// tick finds the lock gone. The new holder waits one Tick plus TickTimeout,
// checking the lock meanwhile, before it starts anything. Combined with the
// tick this keeps the number of processes running runnables at one or zero,
// never two. A crash therefore costs the deferral, Tick + TickTimeout, and
// the standby's poll (MaxStandbyPoll), and nothing more: about 2.3 s at the
// defaults (a 1.5 s tick, a 0.5 s timeout).
//
// Why not skip the deferral when the predecessor crashed? Because the
// successor cannot tell a crash from the cases where the predecessor lives
// on: all it sees is a lock that was freed without a resignation. A kill -9
// frees it (the kernel closes the socket, the server ends the session); so
// do pg_terminate_backend, a Postgres restart and a proxy that drops the
// connection, after each of which the predecessor runs its runnables until
// its next tick fails; and so does the server's lease reaping a
// partitioned holder. Sessions of the predecessor's other connections, the
// server's start time and the like tell some of these apart, but not all
// (a restart ends every session, as a crash does), and a guess that is
// wrong once runs two leaders. So the deferral stays in every case, and the
// tick is short enough that the deferral costs seconds: the default was
// 15 s (a 20 s deferral, which cost a 5 s schedule three ticks after a
// crash); it is 1.5 s. A shorter default would cut the tick timeout under
// half a second, where a loaded database could demote a healthy leader.
//
// What the short tick costs is one query a tick: the leader's ownership
// check reads pg_locks on its own session (each worker's liveness
// heartbeat takes the same tick, internal/liveness). A standby costs more
// than the leader: it tries the lock every MaxStandbyPoll whatever the tick.
//
// The lease keeps its order with the tick at every tick. The server reaps
// a silent session after its TCP keepalives fail (idle a tick, then three
// probes a third of a tick apart, a second each at least: about 4 s at the
// defaults) or after idle_session_timeout (three ticks and the timeout,
// 5 s), both after a partitioned leader has demoted itself by its own
// clock (a tick and the timeout, 2 s); its successor then defers on top.
//
// And the standby notices a crash within MaxStandbyPoll, not the standby
// probe (FERRY_STANDBY_PROBE, 60 s by default): the probe only caps the
// backoff after a failed wait. A crash sends no resignation notice, so the
// standby's poll, a pg_try_advisory_lock every 250 ms on its own session,
// is what finds the lock free.
//
// A runnable registered with RegisterFenced is the exception: its every
// effect is a write fenced by Fence (below), so two terms' copies cannot
// both act, and it starts when the term is recorded, deferral or not
// (ferry's rescue of dead workers, so that a killed leader's jobs do not
// wait out the deferral). Fence accepts its writes from then on.
//
// A stop is a resignation only when it is clean. Every query on the lock
// connection runs on a context that the stop does not cancel, bounded by
// its own timeout (pgx closes a connection whose query is cancelled, and
// the resignation needs it): TickTimeout for a check, at least 5 s for the
// term's writes (record, start, resignation), which run once a term and
// must not cost a short tick its term on a loaded database. The last thing
// before the runnables start is a check. If the connection is gone anyway, the stamp goes
// through a fresh session. And a leader whose runnables are still running a
// tick after their cancellation leaves its term unresigned, so its successor
// defers as after a crash; so does a leader stopped while it still defers
// to an unresigned predecessor, which may still be running.
//
// # Fencing
//
// Leader-only writes record Term() and call Fence inside their transaction,
// with their runnable's context. That context carries the term the runnable
// started in, and Fence checks that term, not the process's current one: a
// runnable of an earlier term that outlived its stop (it ignored its
// cancellation, or finishes under context.WithoutCancel, which keeps the
// term) is refused once its process leads again in a later term, as it is
// when another process leads (TestElector_FenceRefusesAnEarlierTermsRunnable).
// A context of no runnable carries no term and is refused. Fence locks the
// runnable's term row FOR SHARE and then checks, in a second statement, that
// no newer term exists. A new holder locks and updates its
// predecessor's row before it records its own term, so it waits for every
// fenced transaction of the old term to end: a stale leader's write commits
// before the new term begins, or fails.
//
// # A server-side lease
//
// A leader partitioned from Postgres demotes itself at its next tick, but the
// server keeps its session, and the lock, until it notices the dead peer
// (hours with default keepalives). The lock session therefore sets
// idle_session_timeout to three ticks plus the tick timeout (Postgres 14 and
// later; the live leader queries every tick, so it is never idle that long)
// and short tcp_keepalives_* values, and the client dials with short TCP
// keepalives. The server reaps a silent holder soon after it has demoted
// itself, and a standby takes over without a human.
//
// A partition drops every packet and closes nothing, so the leader's
// ownership check gets neither an answer nor an error: its context's
// deadline cuts it off at the tick timeout, and the leader is demoted
// within a tick and its timeout of the partition's start. (No statement
// of the lock connection asks the server to cancel it, with the second's
// grace before the connection is cut that a cancel request takes: a check
// that waited that second was demoted a second late.) TestElector_Partition and the chaos
// suite cut a leader off with a TCP proxy that blackholes both ways
// (internal/testkit/netproxy); `go run ./tools/bench -mode failover`
// measures it (partition_demotion_ms_max).
//
// # Poolers
//
// Session advisory locks and LISTEN need a session of their own. Behind
// PgBouncer in transaction mode, consecutive statements may run on different
// server sessions: the lock is taken on one and "checked" on another, and two
// processes both believe they lead. Point FERRY_SESSION_DATABASE_URL (or its
// earlier name FERRY_ELECTION_DATABASE_URL) at
// Postgres directly (or at a session-mode pool) even when DATABASE_URL goes
// through a transaction pooler. The elector detects the common case at
// acquire time (pg_backend_pid changes between statements) and refuses to
// lead, with ErrPooler in its status and logs.
//
// # Key table
//
// Keys lists every advisory key ferry takes: 911000001 the election,
// 911000002 reserved, 8110731 migrations, 911000005 the recount of the
// bounded queues (jobs.RecountLockKey, held for a transaction; one key
// for every schema of a database), and in the two-int form
// (911000003, worker id) for each worker's liveness and (911000004,
// hashtext(client id)) for the dead-worker fence (internal/liveness) and
// (911000006, hashtext(workflow id)) for the changes to a workflow's steps
// and (911000007, hashtext(workflow id)) for its end (package workflow; one namespace for every schema: a collision only
// makes one wait for the other).
// These are the default deployment's. A deployment in a schema of its own
// (FERRY_SCHEMA) has an election key and a liveness namespace of its own,
// named after the schema (internal/base/schema's Key64; migration 017's
// ferry_liveness_namespace()), because advisory locks are per database;
// the fence's client ids are unique anyway.
package election
