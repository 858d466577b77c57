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
// # Decided at the fetch: parked jobs and gates
//
// A job under a limit never waits where River's fetch looks. When it
// becomes available (inserted, scheduled, retried, snoozed, rescued,
// released by its workflow), a trigger on river_job (migration 032) parks
// it: its state is 'pending', which River never fetches, and its metadata
// names its gate (ferry_gate): the row of ferry_limit_gate for its queue
// and the limits it is under, each with its key. The trigger knows the
// limits from ferry_limit, where each worker registers its own at start
// and marks them seen every minute; while no worker enforces any limit, a
// sequence (ferry_limit_on) says so and the trigger costs an insert one
// read of it.
//
// The workers take parked jobs through ferry's River pilot, before River's
// own fetch (Claim, pilot.SetClaim): it reads the queue's active gates
// (a queue with none parked costs a fetch that one query), then, in one
// short transaction, takes a transaction advisory lock per limit and key (pg_try_advisory_xact_lock: a key another worker is claiming
// from is left to it), reads in a statement of its own (so that it sees
// every claim committed before the locks) the running jobs of each
// concurrency limit (an index of the running gated jobs) and each rate's
// tat, spends that room on the gates in turn (plan), and claims as many
// parked jobs of each gate as River's fetch would (running, attempt
// counted, attempted_by), in River's order. River's fetch takes the rest.
// A waiting job is written when it parks and when it is claimed, never
// while it waits, however many wait: `go run ./tools/bench -mode
// limits-backlog` (1,000,000 ferry.noop jobs parked under 100/s, a
// `worker run` at its defaults, 60 s) started 1.00 of the rate with 2.1
// row writes per start, and the database's CPU per start 1.4 times that
// with 1,000 waiting.
//
// # Fairness
//
// A queue's fairness (the config file's fairness:) is a Limit with Fair
// set, registered as a row of ferry_limit named fair:<queue>, keyed by
// the field whose values share the queue, with no concurrency or rate:
// the park puts every job of the queue behind a gate that names its key
// (and its limits, if any), and the claim serves a fair queue's gates by
// stride scheduling. Each gate has a pass that grows by 1/weight with
// each job claimed from it; a claim takes the gates of the lowest passes
// (at most as many as the fetch asks jobs for) and gives each next job to
// the one of the lowest pass that its limits let start (a gate whose
// limits have no room waits a turn: its pass grows as if it had started
// one). A gate that becomes active joins at the lowest pass the worker
// knows, so a key back from a quiet spell is served at once, with no
// credit for the spell. Neither the lock nor the use read is needed for a
// fairness (it has no room to count): a claim from gates with no limit is
// one statement, outside a transaction, and one more when a gate had
// fewer jobs parked than its share (a quiet key's one job): the room it
// left goes to the others, by stride.
//
// The passes are each worker's own, in memory (fairQueue): each worker
// serves the keys in proportion to their weights, so the workers together
// do too, and nothing is written per claim to keep them. A worker reads a
// fair queue's active gates whole every two seconds and, in between, those
// activated since its last read (ferry_limit_gate.activated, from a
// sequence, set as a gate is made or made active again: migration 033),
// so a fetch reads few rows however many keys the queue has. Each worker
// adds the jobs it claimed from each gate to the gate's count in
// ferry_limit_gate_started every five seconds (a table of its own: those
// writes never wait on a gate's row): ListFair, `enqueue queues` and the
// console read it.
//
// # Concurrency
//
// A concurrency limit's slots in use are its running jobs: those claimed
// and not yet ended, counted over every gate the limit and key are part
// of (ferry_limit_gate_part). Nothing is written when a job ends: its end
// is its slot's release, and a trigger on that end sends River's insert
// notification on the job's queue when its gate has jobs parked, so that
// a worker claims the next one within milliseconds rather than at a poll.
// A killed worker's jobs stay running, and hold their slots, until
// ferry's liveness rescue settles them: a killed worker never lets the
// limit be exceeded.
//
// # Rate: the generic cell rate algorithm
//
// A rate's state per key is one row of ferry_limit_rate: tat, the
// theoretical arrival time of the next start. A start at t (the
// database's clock: every replica measures against one clock) is allowed
// when t >= tat - (Burst-1) * Interval, and sets tat = max(tat, t) +
// Interval, where Interval = Period/Count. A claim takes the jobs whose
// turn comes within the lead (the fetch poll interval, and a quarter
// more): a job claimed ahead of its turn waits for it in this process's
// Middleware, so that the next fetch, a poll interval later, finds the
// following turns still ahead. No window ever sees more starts than the
// rate allows, however late a worker fetches.
//
// # The sweep
//
// The leader runs Sweep every second: it parks the jobs that became
// available under a limit registered in the last minute before its
// registration committed (a worker's start parks all those it finds
// first, Start), frees the jobs parked behind a limit that no worker has
// registered for ten minutes (a limit removed from every config must not
// hold its jobs: made available again, they park behind the limits left,
// if any), marks active a gate that a claim marked drained while a job
// was parking in it (of the gates drained in the last three seconds; of
// those of the last fifteen minutes once a minute and of all once an
// hour, for a park whose transaction stayed open longer), turns the park's sequence off once no worker
// enforces a limit, and forgets idle gates, full rate buckets and old
// limits. `enqueue limits`, the console and the metrics read the limits
// in ferry_limit and their use from the gates (List). During a deploy
// that changes a limit, each worker claims by its own config's numbers; a
// worker without a limit in its config claims nothing behind it.
//
// # Measured
//
// `go run ./tools/bench -mode limits` runs four `worker run` processes whose
// limited jobs are HTTP calls to a receiver that counts them in flight:
// with a concurrency of 20 and jobs of 5 s, 0.96 of the ideal throughput;
// with a rate of 10/s under backlog, 1.00 of the rate with no one-second
// window over 11; with kill -9s of workers mid-run, never more than 20 in
// flight in any 50 ms sample. A global limit no job reaches
// costs a worker's no-op throughput a claim per fetch and a trigger per
// end (`go run ./tools/bench -mode limits-overhead`: 0.93 of the same
// worker without limits, over jobs inserted while the limit was
// registered). `go run ./tools/bench -mode fairness`: keys of weights
// 1:2:7 started 0.101, 0.202 and 0.697 of the jobs; a quiet key's job
// beside another's 500,000 started within 173 ms at p99 (a saturated
// worker's fetch cycle; 11.8 ms on an idle queue); a fairness over
// 10,000 keys kept 0.79 of the queue's no-op throughput.
package limit
