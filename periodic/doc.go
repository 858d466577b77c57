// Package periodic is ferry's scheduler: every tick of every durable
// schedule becomes a River job exactly once across all replicas, with cron
// in IANA time zones, defined DST behaviour and missed-tick catch-up.
//
// # Triggers
//
// Every(d) fires at every multiple of d since the Unix epoch in UTC: every
// 5m fires at :00, :05 … on every replica alike, with no drift (the next tick
// is the next multiple after the clock, not a delay after the last run) and no
// burst. ParseCron reads five-field cron (lists, ranges, steps, month and
// weekday names, Sunday as 0 or 7, @hourly … @yearly) in a zone. DST follows
// cronie: a fixed-time entry whose wall time is skipped fires once, an hour
// (the gap) later; one whose wall time repeats fires once, at its first
// occurrence; entries with * in the minute or hour field follow real time.
// The parser and the next-time logic are ferry's own: robfig/cron v3, the
// usual choice, was measured to skip such a 02:30 entry on the
// spring-forward day, to run it twice on the fall-back day, and to reject
// Sunday as 7 (see cron.go).
//
// # Exactly once
//
// The scheduler runs on the leader only (a leader runnable of package
// election). At each tick it opens one transaction that
//
//  1. checks the leader's term is still the newest (election Fence),
//  2. inserts (schedule_id, tick_at, term) into ferry_periodic_tick, ON
//     CONFLICT DO NOTHING,
//  3. only if that row is new, inserts the River job (or records the tick as
//     skipped) and updates ferry_schedule.
//
// Two leaders, a retry after an error, a restart: the primary key of
// ferry_periodic_tick lets one transaction through per tick, and the job
// commits with it or not at all.
//
// # Catch-up
//
// A new leader (boot or failover) looks at each schedule's last recorded
// tick. The ticks missed since are recorded as skipped ("missed: no leader
// was running"), except the latest: with CatchUpLast (the default) it is
// enqueued if it lies within the schedule's misfire window (default one
// interval), never a burst of old ticks. A schedule that never ticked owes
// nothing. At most 1000 missed ticks per schedule are recorded.
//
// # Overlap
//
// With OverlapSkip (the default) a tick whose previous job is still
// unfinished (available, scheduled, running, retryable, pending) is recorded
// as skipped with the job named in the reason; OverlapAllow enqueues anyway.
//
// # Full queues
//
// A tick whose job its queue refuses because the queue is at its bound
// (jobs.ErrQueueFull) is recorded as skipped with reason "queue full"
// (ReasonQueueFull): not retried, and not an error of the leader's
// runnable; the schedule's next tick tries again. The ticks claimed in one
// transaction are inserted in one statement in a savepoint; when a queue
// refuses it, each is inserted again in a savepoint of its own, so the
// ticks of queues with room are enqueued.
//
// # Local schedules
//
// Local schedules (Local: true, Go code only) run a function in every
// process on an in-process timer: not leader-gated, not durable, for what each
// process keeps in memory.
//
// # Observability
//
// ferry_schedule holds each schedule's trigger, zone, next run, last tick and
// last job, kept current by the leader. Each claimed tick logs
// "periodic: tick enqueued" (schedule, name, tick, job_id) or
// "periodic: tick skipped" (with the reason). Metrics:
// ferry_periodic_ticks_total{schedule,status} on the leader and
// ferry_schedule_last_tick_age_seconds{schedule,name} on every replica.
package periodic
