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
//	  ┌────────► probe ──── lock taken by another, or error ───► standby ──┐
//	  │            │                                               ▲  │    │
//	  │            │ pg_try_advisory_lock on a fresh connection     │  │ every Probe, or at once
//	  │            ▼                                               │  │ on a resignation NOTIFY
//	  │     record term (ferry_leader_term) ─── error: unlock ─────┘  └────┘
//	  │            │
//	  │            ├── predecessor resigned ──────────────┐
//	  │            ▼                                      ▼
//	  │         deferred ── Tick + TickTimeout ──► check ─► leader (runnables run)
//	  │            │                                │       │
//	  │            │ tick fails                      fails   │ tick fails: no row, error, timeout
//	  │            ▼                                ▼       ▼
//	  └──────── demoted: runnables cancelled, connection closed
//
//	Stop (any state): runnables cancelled, resigned_at stamped, unlock, NOTIFY, close.
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
// the connection and becomes a standby ("election: demoted").
//
// # Why the database predicate
//
// pg_locks is cluster-wide, and advisory keys are per database: the same key
// held in another database on the same server is another election. Every
// query on pg_locks carries database = (SELECT oid FROM pg_database WHERE
// datname = current_database()).
//
// # Why the deferral
//
// A new holder does not know whether its predecessor has stopped. If the
// predecessor resigned (its term has resigned_at stamped), it has: its
// runnables stopped before it unlocked, and the new leader starts at once.
// Otherwise (crash, killed connection, first term ever) the predecessor may
// still be running its runnables until its next tick finds the lock gone. The
// new holder waits one Tick plus TickTimeout, checking the lock meanwhile,
// before it starts anything. Combined with the tick this keeps the number of
// processes running runnables at one or zero, never two. Leader-only writes
// record Term() and may call Fence inside their transaction.
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
// # Poolers
//
// Session advisory locks and LISTEN need a session of their own. Behind
// PgBouncer in transaction mode, consecutive statements may run on different
// server sessions: the lock is taken on one and "checked" on another, and two
// processes both believe they lead. Point FERRY_ELECTION_DATABASE_URL at
// Postgres directly (or at a session-mode pool) even when DATABASE_URL goes
// through a transaction pooler. The elector detects the common case at
// acquire time (pg_backend_pid changes between statements) and refuses to
// lead, with ErrPooler in its status and logs.
//
// # Key table
//
// Keys lists every advisory key ferry takes: 911000001 the election,
// 911000002 reserved, 8110731 migrations.
package election
