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
// Inserter's and the server's), is what enforces it.
//
// # Sealing
//
// With seal keys (FERRY_SEAL_KEYS, or WithSealKeys), an Inserter seals
// every job it inserts, on every insert path of its client, COPY included
// (package seal); workers with keys refuse jobs without a seal. Middleware
// is the list every River client ferry builds installs: the unique key,
// then the seal. A River client of your own inserting for ferry's workers
// needs it too.
package jobs
