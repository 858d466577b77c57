// Package liveness knows which worker processes are alive, and takes back
// the running jobs of those that are not.
//
// River rescues a running job only after RescueStuckJobsAfter (an hour by
// default): a worker killed with kill -9, OOM-killed or lost with its host
// leaves its jobs running that long. ferry knows within a second (the
// rescue interval), because Postgres ends a process's sessions when the
// process dies.
//
// # Liveness
//
// Each worker process (Worker) records itself in ferry_worker, keyed by its
// River client id (what River writes into river_job.attempted_by), and
// holds the session advisory lock (ferry_liveness_namespace(),
// ferry_worker.id): Namespace in the default deployment, one named after
// the schema in a deployment of FERRY_SCHEMA (migration 017), whose
// workers are numbered from 1 too; it is held on a session
// of its own, named ferry-liveness:<host>:<pid>, from before its River
// client fetches anything until after it has stopped. The worker is alive
// exactly while some session holds that lock. A heartbeat every tick keeps
// last_seen_at current for operators and the session busy: the session sets
// idle_session_timeout to three ticks plus the tick timeout, with short TCP
// keepalives, so a worker partitioned from Postgres has its session, and
// so its liveness, ended by the server like a dead one.
//
// Registration is an upsert on the client id, and Start returns only once
// the worker holds its lock: the reply to the registering COMMIT can be
// lost (a proxy, a network fault) after the row and the lock were
// committed, and the session with the lock gone with it. The next try
// (soon, then every second, for up to the lease) finds its own row,
// waits for the lock (its old session may still hold it) and reads
// dead_at once it has it. A worker that cannot register returns the error
// from Start, and its process stops: working unregistered would only
// have it sit alive and fenced (below). One found declared dead returns
// ErrDeclaredDead.
//
// # The lease
//
// The server ends a liveness session silent for the lease (three ticks
// plus the tick timeout), or sooner when its keepalive probes go
// unanswered (lease.KeepaliveBound: a tick, then three probes a third of a
// tick apart): both clocks start no earlier than the arrival of the last
// statement the worker sent. So the worker knows, by its own clock, the
// earliest moment the server may end its session and the rescuer hand its
// jobs to others: the send time of its last answered heartbeat plus the
// shorter of the two. A tick timeout before that moment (keep), its watch
// cancels every running job's context with ErrLeaseLost and the Ledger
// starts no job (it snoozes each one fetched, the attempt given back),
// until a heartbeat or a new session confirms the worker again. A worker
// cut off from Postgres, or paused (SIGSTOP, a frozen VM), so stops its
// jobs before their rescued copies can start; a paused one stops them as
// it resumes, before their next step, because a job's context reads the
// lease itself (Ledger.JobContext). A job cut short that way returns the
// cancellation's error, which the Ledger turns into a snooze: the attempt
// was not the job's fault.
//
// # Rescue
//
// The Rescuer is a leader runnable. Every Interval (FERRY_RESCUE_INTERVAL,
// a second by default, not the leader tick: a pass that finds nobody dead
// is one read) it lists the workers not declared dead whose lock nobody
// holds and that are gone: no session of theirs is connected (their
// SessionTag in pg_stat_activity), or their last heartbeat is older than
// two ticks plus the tick timeout (RescuerConfig.Stale). A live worker whose
// liveness session alone was ended (pg_terminate_backend, an idle-session
// killer, a proxy restart) has its pool's sessions connected and a recent
// heartbeat, and takes its lock again at once: a pass that lands in
// between leaves it alone. A process that died has no session left; one
// cut off from the server keeps its pool's sessions in the server's eyes,
// but its liveness session ends only a lease after its last heartbeat,
// which is stale by then. For each, in one transaction fenced by the leader's term: takes the worker's lock itself
// (pg_try_advisory_xact_lock, so that the worker cannot take it back
// mid-rescue; if it cannot, the worker is alive again and is left alone),
// stamps dead_at, and takes back every running job whose latest attempt is
// the worker's. As River's rescuer would, the attempt counts and a job with
// no attempt left is discarded; unlike it, the job is available at once,
// not after a backoff. Each such death is counted in the job's metadata
// (ferry_orphaned); the death that brings the count to MaxOrphaned
// (FERRY_MAX_ORPHANED, default 5) discards the job with the error
// "ferry: the worker died running this job N times": a job that kills its
// worker is poison, and goes to the dead letters instead of killing the
// next one. A job whose cancellation was requested (River's JobCancel
// stamps cancel_attempted_at in its metadata, and only its worker could act
// on it) is cancelled instead, as River's own rescuer does. It logs
// "rescue: orphaned jobs rescued" (worker, count) and counts
// ferry_jobs_rescued_total{reason}.
//
// A dead worker whose River client led River (river_leader) has that
// leadership resigned in the same transaction, with River's own statement
// and notification, so that another River client is elected at once:
// River's scheduler (snoozed, retried and scheduled jobs made available),
// periodic jobs and cleaners run on River's leader only, and River alone
// waits out a dead leader's term (15 s) and then its next election
// attempt (5 s more). It logs "rescue: River's leadership of the dead
// worker resigned" (worker).
//
// Its every write is fenced, so it runs with the term, while a new leader
// still defers to a crashed predecessor (election's RegisterFenced): a
// killed leader's jobs are back within a pass of the failover, not after
// the deferral (Tick + TickTimeout). What the deferral gave the rescue
// besides, time for live workers to take their locks again after the
// server ended every session (a restart, a promoted standby), Settle gives
// it here: no pass rescues while every ferry worker session on the
// server (application_name carrying a SessionTag) is younger than the
// tick plus its timeout, unless the server shows none of what such an end
// leaves behind: the rescuer's own worker holds its lock on the session it
// registered on, no live worker holds its lock on a later one, and the
// server neither started nor was promoted within that window
// (RescuerConfig.Self). A fleet that has just started, all of its
// sessions young, has a killed worker's jobs back within a pass, not once
// the fleet is a tick and its timeout old. A worker reads its idle liveness session between
// heartbeats, so it hears the server end it (a terminated backend, a
// shutdown) and takes its lock again at once, waiting up to the tick
// timeout for the old backend to let it go; a loss nobody announces (a
// partition) is found by the next heartbeat, at most a tick late. It
// tries again every second until it has the lock.
//
// A job running on a live worker is never rescued, however long it runs
// and however slow or busy the worker is: liveness is the lock, not a
// timestamp.
//
// # Jobs running here that this worker does not run
//
// A live worker can be shown running a job it does not run. A primary
// failover or a lost connection does it in two ways: River's fetch
// committed and its reply was lost, so the job never reached the worker;
// or the worker finished the job and River's completer, after three tries
// over about 37 s, gave up writing the outcome. The rescuer leaves a live
// worker's jobs alone, and River's own rescuer waits an hour: such a job
// would sit running that long, its outbox message undelivered (the chaos
// suite's primary failover found two).
//
// So each worker keeps a Ledger (its Middleware, outermost on the River
// client) of the jobs whose worker it started and how each returned, until
// River's client reports the outcome written (its events), and after a
// heartbeat, every quarter of SettleAfter (or every tick, if longer),
// compares it with the jobs the database shows running under its client
// id that may be strays: those due before SettleAfter ago, and those the
// Ledger holds finished and unreported for that long. It does so on its own pool, not on the
// liveness session: a query there that a paused process lets time out
// would close the session and free the lock of a live worker; on the
// pool, the fence refuses its writes once the worker is declared dead,
// as it refuses River's. A job it never started, fetched more than
// SettleAfter ago (FERRY_SETTLE_AFTER, default a minute, past River's
// 37 s), goes back to available with its attempt given back; a job whose worker returned more
// than SettleAfter ago is written as River would have written it
// (completed; retryable after River's default backoff, or discarded with
// no attempt left; cancelled; snoozed). Both are marked in
// metadata.ferry_settled ("never started", "completion lost"), logged as
// "liveness: stray jobs settled" and counted in
// ferry_jobs_settled_total{outcome}. A job whose worker is still running
// is never touched.
//
// # A worker that comes back
//
// A worker whose session was lost (a partition longer than the lease, a
// pg_terminate_backend) takes its lock again on a new session at its next
// heartbeat. If the rescuer got there first, the worker finds dead_at
// stamped, or its row gone (the rescuer forgets a dead worker's row a day
// after its death), calls OnDead, and the process stops, cancelling its
// running jobs without a grace period: they run elsewhere now.
//
// River completes a job with an UPDATE that matches state = 'running' and
// not the attempt, so by itself a worker that comes back late could
// overwrite the outcome of the attempt that replaced its own. ferry adds a
// fence in the database (migrations 006, 015, 016, 019, 025): every session
// of a worker ends its application_name with the worker's SessionTag
// (ConfigurePool), recorded in ferry_worker.session_tag, and a
// statement-level trigger refuses any UPDATE of river_job from a session of
// a worker declared dead, or tagged as a worker's with no row to vouch for
// it (migration 028: a worker registers before any of its sessions writes
// river_job, so such a session is a dead worker's whose row was forgotten)
// (SQLSTATE FR001, IsDeclaredDead). Its column list
// is every column but kind (migration 025): River's insert, INSERT … ON
// CONFLICT … DO UPDATE SET kind = river_job.kind, fires UPDATE statement
// triggers whether a row conflicts or not, and changes no job; with the
// list it no longer calls the fence. The tag is in
// application_name, not in a session setting, because a transaction pooler
// (PgBouncer) sets a client's application_name on whichever server session
// it lends it, while a setting stays with the server session and would
// name the wrong worker there. The trigger has no WHEN clause (migration
// 019): Postgres plans a trigger's WHEN again for each statement, which
// cost every UPDATE of river_job more than a call of the function that
// tests the session first and returns. The trigger and
// the rescue meet on the transaction advisory lock (FenceNamespace,
// hashtext(client id)): every UPDATE from a worker's session holds it shared
// to the end of its transaction, and the rescue, having stamped dead_at,
// takes it exclusively before it looks for the worker's running jobs. An
// UPDATE in flight (a fetch that set jobs running) has committed by then,
// and its jobs are taken back; an UPDATE that comes after waits for the
// rescue to commit, then reads dead_at and is refused. The rescue waits at
// most a tick for a session still in a transaction. One still there after
// the wait belongs to a worker that is not alive, and is usually one the
// server cannot see is gone (a partition, a lost host: the server's TCP
// keepalives take two hours by default), which would otherwise hold the
// rescue back as long: the rescuer ends the worker's sessions that are in
// a transaction (pg_terminate_backend, holding the worker's lock, so that a
// worker that has just come back is never touched), logs "rescue: ended the
// dead worker's sessions left in a transaction" and tries again at once.
// Their transactions roll back; their jobs are rescued like the others.
// Only sessions of the rescuer's own role are ended (or any, with
// pg_signal_backend); another role's are waited for, pass after pass.
//
// River's own rescuer stays as the backstop for what liveness cannot see
// (a River client that is not a ferry worker), with RescueStuckJobsAfter
// tied to the longest job timeout rather than a flat hour.
package liveness
