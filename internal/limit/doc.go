// Package limit enforces concurrency and rate limits on jobs across every
// worker that shares the database: the config file's limits: section.
//
// # Limits
//
// A Limit names a job kind or a queue and, optionally, a key: a top-level
// field of the job's args (tenant_id), so that each value gets a limit of
// its own (jobs without the field share the empty key's). It has a
// concurrency (at most N of its jobs run at once), a rate (at most Count
// start per Period, s, m or h, with Burst of them at once after a quiet
// spell; in any window w at most Burst + Count*w/Period start), or both.
// A job under several limits (its kind's and its queue's) starts when all
// of them let it, and takes from all at once, or from none.
//
// # Where it is decided
//
// River fetches the jobs; the Limiter's worker middleware decides, before
// the job's worker runs, in one short transaction holding a transaction
// advisory lock per limit and key (taken in name order, so two jobs never
// deadlock): the decision reads and writes only ferry_limit_slot,
// ferry_limit_wait and ferry_limit_rate, and, when the limit looks full,
// river_job's state of the jobs holding slots. A process's decisions are
// combined: whichever job asks while no transaction of its process is
// deciding runs one for every job that asked (and every job that ended)
// meanwhile, in three round trips, so that a busy limit's lock is taken
// once a batch, not once a job. A job's release joins a batch in the
// background: the worker goes back to River at once, and the slot is held
// a little longer than the job ran, never shorter (a stopping Server
// waits for the releases, Wait). Without the batches, a global limit no
// job ever reached cut a worker's no-op throughput to 0.014 of its rate on
// this project's machine; with them, to about 0.67 (`go run ./tools/bench
// -mode limits-overhead`; River #1145 reports half for River Pro's).
//
// A job that may start takes its slot or token and runs; its slot is
// given back just after its worker returns. A job that may not is snoozed
// (river.JobSnooze: River gives its attempt back) and queued in
// ferry_limit_wait: waiting never burns an attempt, never records an
// error, and holds a worker only for a rate turn that is near (below).
// River's paid tier decides in its fetch query; ferry decides after the
// fetch, which costs a waiting job one fetch and one snooze, and keeps
// River's open-source fetch as it is.
//
// # Concurrency: slots handed over
//
// A slot is a row of ferry_limit_slot: the job that holds it and whether
// it has started. A job holds its slot while River shows it running; a
// slot whose job no longer runs is stale and taken back by the next
// decision (a killed worker's jobs hold theirs until ferry's liveness
// rescue settles them, so a killed worker never lets the limit be
// exceeded). When a job ends, the transaction that takes its slot back
// hands it to the job waiting longest: a slot reserved in that job's
// name (started false), the job made available at once and River's insert
// notification sent on its queue, so a worker fetches it within
// milliseconds rather than at a poll. A woken job finds its slot waiting
// for it. No fixed snooze leaves a slot idle: a job whose snooze River had
// not yet written when it was handed a slot is woken when River's
// job_snoozed event says the snooze is written (Run), and the leader's
// sweep wakes any left a second later; a waiting job's snooze lasts
// Backstop (a minute) only in case everything else failed.
//
// # Rate: the generic cell rate algorithm
//
// A rate's state per key is one row: tat, the theoretical arrival time of
// the next start. A start at t (the database's clock: every replica
// measures against one clock) is allowed when t >= tat - (Burst-1) *
// Interval, and sets tat = max(tat, t) + Interval, where Interval =
// Period/Count. A job that may not start yet takes its place in the key's
// queue (queued_until, the due time of the last one queued, plus one
// interval): a near turn (within 250 ms) it waits in process, a further
// one it is snoozed until a fetch poll interval (Lead) before its turn, and
// then waits out the rest in process. A turn further than River's
// scheduler interval (5 s) takes two snoozes: River makes a longer-snoozed
// job available up to an interval late, so the job comes back an interval
// early and snoozes the rest, which River leaves available to be fetched
// at its time. Jobs queued behind it go behind it;
// the start itself is always checked against tat at the moment it
// happens, so however late or early a job comes back, no window ever
// sees more starts than the rate allows.
//
// # The sweep
//
// The leader runs Sweep every second: it hands slots freed without a
// release (a killed worker's jobs once rescued, a waiting job deleted) to
// waiting jobs, wakes the jobs handed a slot before their snooze was
// written, forgets the places of jobs that will not run, wakes the jobs of
// limits that no worker has registered for ten minutes (a limit removed
// from every config must not hold its jobs), and drops rate rows whose
// bucket is full (the same as no row). Each worker registers its limits in
// ferry_limit at start and marks them seen every minute (Run); `enqueue
// limits`, the console and the metrics read them there (List). During a
// deploy that changes a limit, each worker enforces its own config's
// numbers.
//
// # Measured
//
// `go run ./tools/bench -mode limits` runs four `worker run` processes whose
// limited jobs are HTTP calls to a receiver that counts them in flight:
// with a concurrency of 20 and jobs of 5 s, 0.99 of the ideal throughput;
// with a rate of 10/s under backlog, 0.97 to 0.98 of the rate with no one-second
// window over 11; with kill -9s of workers mid-run, never more than 20 in
// flight in any 50 ms sample.
//
// What it does not hold: a large backlog. Every waiting job is fetched,
// decided on and snoozed again and again, so the cost grows with the jobs
// waiting, not with the jobs started: `go run ./tools/bench -mode
// limits-backlog` (1,000,000 ferry.noop jobs under 100/s) started none in
// 60 s, at 6,120 row writes a second. Deciding in the fetch (ferry's River
// pilot owns JobGetAvailable, as priority aging does) is the way out.
package limit
