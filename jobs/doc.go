// Package jobs is ferry's job catalog: the built-in kinds with their typed
// args and workers, the kind registry, and the insert helpers that Go
// services use inside their own transactions.
//
// # Built-in kinds
//
//   - ferry.noop (NoopArgs): does nothing, or sleeps for args.sleep; for smoke
//     tests, benchmarks and drills.
//   - http.request (HTTPRequestArgs): one HTTP call. 2xx completes; 408, 429,
//     5xx and transport errors (timeouts included) fail the attempt and River
//     retries on its backoff; any other status cancels the job with the status
//     and a bounded snippet of the body. Secrets go in headers_env (names of
//     environment variables), never in args, which are stored in river_job.
//
// Capabilities keep their own kinds (outbox.deliver lives in outbox); the
// root package fills one Registry from all of them.
//
// # Kinds and the registry
//
// A Kind is made with Define from a River worker, and names the queue its
// jobs go to and a description for operators. A worker process publishes
// its registry to ferry_job_kind at start, which is how the enqueue CLI
// knows which kinds exist: it refuses any kind that is neither built in nor
// published.
//
// # Inserting from Go
//
// Inserter wraps an insert-only River client. InsertTx inserts in the
// caller's pgx.Tx, so the job exists if and only if the caller's transaction
// commits. WithUniqueKey gives an insert a caller-chosen idempotency key;
// UniqueKeyMiddleware, installed on every River client ferry builds (an
// Inserter's and the server's), is what enforces it. When the inserting
// context holds an OpenTelemetry span and the service imports the otelferry
// module (github.com/ferryq/ferry/otelferry), the span's W3C trace context
// goes into the job's metadata (traceparent, tracestate), and the worker's
// span of the job is its child (see Middleware); this package links no
// tracing library itself.
//
// # Debounce
//
// WithDebounce makes inserts of one kind with one key collapse into one
// job, due a window after the last insert (and no later than an optional
// max wait after the first), with the last insert's args; an insert while
// the key's job runs schedules one run after it. The key is River's unique
// key (states pending, scheduled, available, running, retryable), so
// River's unique index decides which insert is first; InsertTx and
// InsertManyTx then collapse the others into the job found, in the
// caller's transaction, through the database function ferry_debounce
// (migration 031), which also notes the run after a job that has started;
// a trigger inserts that run in the transaction that ends the job. A COPY
// (EncodeCopy, CopyFromTx) does not collapse: a key's second job fails
// it, as any duplicate does (enqueue bulk sends debounced lines through
// InsertManyTx).
//
// # Inserting many jobs with COPY
//
// For inserts of many jobs at once, EncodeCopy turns them into rows of
// river_job, the rows River's InsertManyFastTx writes (its defaults, the
// args' InsertOpts, the insert middleware: trace context, WithUniqueKey,
// seal), and CopyFromTx streams batches of rows into one COPY in the
// caller's transaction, with River's insert notification at commit.
// EncodeCopy runs on any number of goroutines while the COPY runs, so the
// server never waits for a batch to be prepared, as it does between River's
// InsertManyFastTx calls: `enqueue bulk` inserts 300,000 jobs at 0.85 of a
// plain COPY of ready rows with it, against 0.70 through InsertManyFastTx.
// River's own UniqueOpts are refused (River computes their keys inside its
// insert); WithUniqueKey works, and a duplicate fails the whole COPY, as
// River's COPY does.
//
// # Bounded queues
//
// A queue with a bound (ferry_queue.max_length, set by SetQueueBounds, which
// a worker calls at start from its config file's `queues:` and
// FERRY_QUEUE_MAX_LENGTH) holds at most that many
// jobs in the states available, scheduled, retryable, pending and running
// together. A statement that would put it over is refused whole, with
// SQLSTATE FR002 (ErrCodeQueueFull); AsQueueFull turns that error into a
// *QueueFullError (errors.Is(err, ErrQueueFull)) with the queue, its bound
// and its length. Inserter.InsertTx and InsertManyTx return it, and so does
// every River client that installs UniqueKeyMiddleware (the server's: the
// scheduler, the relay and Telegram insert through it).
//
// The bound is enforced in the database (migrations 010, 013 and 018), not in
// Go, so that
// it holds on every path that writes river_job: plain-SQL inserts from other
// services, River's own clients, `enqueue jobs retry` of a finalized job, a
// job moved between queues. Statement-level AFTER triggers on river_job,
// with transition tables, sum per bounded queue the rows that enter and
// leave the counted states, and keep three counters; the length is
// admitted - refunded - released:
//
//   - entering rows take as many values from the queue's admitted
//     sequence. A sequence is not transactional: its last value counts
//     the jobs of every transaction still in flight, so concurrent
//     inserters never wait for each other, and none can miss another's
//     jobs: the bound is never overshot;
//   - a statement refused as over the bound gives its values back through
//     the refunded sequence before it fails;
//   - leaving rows (completed, cancelled, discarded, deleted) add to
//     ferry_queue_released.released, a row of its own, in the releasing
//     transaction. An inserter reads it without a lock: a committed value
//     that only grows.
//
// Every error is on the side of a longer queue, so an insert may be refused
// a moment early (a completion not yet committed), never admitted one too
// many. A transaction that inserts into a bounded queue and then rolls
// back leaves its jobs counted (a sequence does not roll back) until the
// leader's recount (RecountQueues, every minute) gives them back. A job in
// an open transaction holds its place until the transaction ends.
//
// # The recount
//
// The recount takes no lock on river_job that a writer or a VACUUM waits
// for. (Its first form counted under LOCK TABLE river_job IN SHARE ROW
// EXCLUSIVE MODE: the lock waited behind any VACUUM of river_job, and every
// insert, fetch and completion queued behind the waiting lock; or it
// cancelled autovacuum, every minute.) It gives back only admissions it
// can prove rolled back, so the length from the counters never falls
// below the true one. For each bounded queue, in one transaction of READ
// COMMITTED (it holds no snapshot while it waits) under the advisory lock
// RecountLockKey (one recount at a time; the start of a queue's counters
// takes it too):
//
//  1. it reads a0, the admitted sequence: every admission up to a0 was
//     taken by a transaction writing river_job at that moment, or one
//     that has ended;
//  2. then it reads the job id sequence, idMark, and the transactions
//     holding ROW EXCLUSIVE on river_job (pg_locks). A job with an id
//     above idMark was inserted, and so admitted, after a0 was read;
//  3. it waits, up to its timeout, for those transactions to end (their
//     virtualxid locks, polled; it waits on nobody's lock and nobody
//     waits on it), so every admission up to a0 is committed or rolled
//     back; a prepared transaction, or one still open, defers the recount
//     to the next minute (ErrRecountDeferred), with nothing changed;
//  4. in one snapshot it counts the queue's jobs in the counted states
//     (counted), those of them with an id above idMark (since), and reads
//     released; refunded it reads after. The committed admissions up to a0
//     are at least counted + released - since - (the refunds and
//     give-backs before): what is left of a0 rolled back, and is given back
//     by a setval of refunded to its value plus that amount (refunded only
//     grows, as the insert trigger's cache of it needs).
//
// Each term errs only towards giving back less: a job admitted after a0
// with an id at or below idMark (an insert between the two reads, a retry
// of a finalized job, a move between queues) counts as admitted before;
// a job inserted after idMark and finalized within the wait is in
// released but not in since. What is not given back is given back by a
// later recount that runs when no job is inserted and finished within its
// wait; under a steady stream of such jobs a few admissions can stay
// counted a while: a refusal a little early, never an overshoot. A
// refund that lands between the read of refunded and its setval is lost,
// which also counts on the long side, and the next recount gives it back.
// A job id must come from river_job's sequence (River's), in order: a row
// inserted with an id chosen by hand above the sequence would count as
// admitted after a0 and could be given back twice.
//
// The recount's cost to writers is its count of the bounded queues' jobs
// in the counted states, a read; tools/bench -mode bounded measures fetch
// latency with and without recounts running.
//
// The triggers are on river_job only while some queue has a bound
// (migration 013): setting the first bound puts them there, in the
// transaction that counts the queue, and the leader's recount drops them
// once no queue has one (ACCESS EXCLUSIVE for a moment, with its lock
// timeout; it retries each minute), or puts them back, counting again, if
// they went missing while a queue has a bound. A deployment that never
// sets a bound runs no trigger of this design on any write.
//
// Why not a counter row: the first form of this design kept admitted in
// the queue's row of ferry_queue, updated under its lock. That lock is held
// until the inserting transaction commits, so inserts into one bounded
// queue took turns on their commits: 0.23 of the unbounded throughput for
// single-job transactions from 8 goroutines (tools/bench -mode bounded);
// 0.68 with the sequences, whose inserters never wait; 0.85 to 0.86 since a
// statement whose jobs go to one queue (each single insert, each chunk of
// a bulk insert) costs one query over its rows and the queue's counters.
// Migration 018 took the ratio past 0.9: the bounds are compiled into
// the INSERT trigger's function (ferry_queue_compile writes it anew, at
// commit, whenever a transaction changes a bound or a queue's counters:
// the bounded queues' names, bounds and sequences as constant arrays), so
// no row of ferry_queue is read on the way in; the jobs gone from the
// queue (refunded + released) are cached in the session, a value never
// above the true one (both only grow while the counters run, and a
// restart of the counters renames the setting), and read again only when
// the cached value puts the queue over its bound; and a single row is
// read with LIMIT 1 rather than an aggregate, whose executor start cost
// more than the rest of the trigger. Measured in instructions (callgrind,
// River's insert SQL on a single-user backend, one job per transaction):
// 735,000 an insert without ferry's triggers, 180,000 more with a bound
// before, about 105,000 after (the INSERT trigger 78,000, the same with
// one bounded queue or thirty; the UPDATE trigger that River's INSERT …
// ON CONFLICT DO UPDATE fires 28,000). plpgsql prepares each expression
// it evaluates again in every transaction, about 4,800 instructions each:
// migration 026 returns NEW (NULL in a statement trigger, a variable and
// no expression) instead of NULL, and takes a single job's place in the
// query that reads the row, leaving one IF. Measured the same way with
// River's insert prepared, as pgx sends it: 471,200 an insert without
// ferry's triggers, 91,600 more with a bound before migration 026, 80,700
// after.
// Changing ferry_queue is refused in REPEATABLE READ or SERIALIZABLE (the
// compile must read committed rows), and takes a role that owns
// ferry_queue_count_insert (the migrating role, which bounding a first
// queue needs anyway, for CREATE TRIGGER on river_job). A bound checked in Go, by a
// statement of its own in the inserting transaction, measured no better
// than the trigger of migration 013 (pgbench with River's insert SQL, 8
// clients: 0.81 of the unbounded rate against the trigger's 0.77; the
// round trip costs what the trigger did), and would leave plain-SQL
// inserts unbounded. A trigger with transition tables cannot take a
// column list (UPDATE OF state, queue), so River's inserts still call the
// UPDATE trigger, which returns after one LIMIT 1 read: 17,300
// instructions of the bound's 85,000 (callgrind, River's insert prepared,
// each job in its own transaction: 783,500 an insert without a bound,
// 868,600 with one). Gating it with a WHEN that only a BEFORE UPDATE OF
// state, queue trigger's mark makes true cost 12,000 more than the call
// it skips: Postgres reads a trigger's WHEN anew in every statement.
// (The dead-worker fence, a BEFORE UPDATE statement trigger without
// transition tables, has one since migration 025: River's inserts no
// longer call it, bounded or not.)
//
// Counters are exact only while a queue is bounded, so setting a bound on a
// queue that had none counts its jobs in a transaction that first takes
// LOCK TABLE river_job IN SHARE ROW EXCLUSIVE MODE (SHARE would let two
// workers bounding queues at once deadlock on CREATE TRIGGER's lock): it waits for the transactions writing
// river_job to end and holds new writers back for the moment the count
// takes. Changing a bound that exists, or setting one that does not change,
// takes no such lock. Two workers configured with different bounds for one
// queue: the last one started wins, and logs `queues: bound changed` with
// the old and new bound; keep one bound per queue in your deploys. A
// REPEATABLE READ or SERIALIZABLE transaction whose snapshot predates a
// bound being first set does not see the bound and is not counted; the
// bound is exact for transactions that start after it.
//
// # Errors
//
// ErrorMiddleware, innermost on the server's River client, cuts every
// worker error's message to MaxErrorBytes before ferry logs it and River
// stores it (river_job.errors, the dead letters' reason). A kind defined
// with the SensitiveErrors option keeps only its errors' Go type (and a
// panic's value's type, without River's trace): its messages may hold
// personal data. The rewritten error (a *StoredError) unwraps to the
// worker's, so cancellation, snoozing and shutdown work as before.
//
// # Sealing
//
// With seal keys (FERRY_SEAL_KEYS, or WithSealKeys), an Inserter seals
// every job it inserts, on every insert path of its client, COPY included,
// and EncodeCopy's rows (package seal); workers with keys refuse jobs without a seal. Middleware
// is the list every River client ferry builds installs: the unique key,
// then the seal. A River client of your own inserting for ferry's workers
// needs it too.
//
// # Module
//
// jobs is a Go module of its own (github.com/ferryq/ferry/jobs), like
// outbox, seal, locks and broadcast: a service that requires it gets River
// and pgx in its module graph, never the worker's requirements (River UI,
// Prometheus, OpenTelemetry, the CLI). A service that traces with
// OpenTelemetry adds otelferry, whose module brings the OpenTelemetry API
// it has already.
package jobs
