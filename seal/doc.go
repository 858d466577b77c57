// Package seal makes a job run only if ferry inserted it. Whoever can INSERT
// into river_job can otherwise run any registered kind with arguments of
// their choosing (an http.request to anywhere, with the worker's header
// secrets); with seal keys, a worker refuses every job it did not seal.
//
// # Keys
//
// FERRY_SEAL_KEYS holds comma-separated base64 keys of at least 32 bytes
// (GenerateKey, or `openssl rand -base64 32`, makes one). The first seals,
// all verify: to rotate, put the new key first everywhere
// (inserters and workers), deploy, and drop the old key once nothing it
// sealed is waiting. Keys are secrets: a Keys never prints them (String,
// Format), errors name a key by its position, and a seal carries only a key
// id, a short HKDF-derived hash. The MAC key and the id are derived from
// each key with HKDF under distinct labels, so neither tells of the other.
//
// # The seal
//
// The insert middleware (Middleware, installed by jobs.Middleware on every
// River client ferry builds: jobs.Inserter, the enqueue CLI, the server's
// client that the scheduler, the outbox relay (and so the Telegram poller,
// whose updates it relays) and embedders insert with) writes metadata.ferry_seal:
//
//	{"v": 1, "k": key id, "r": run id (128 random bits),
//	 "q": queue, "d": due (unix seconds), "m": HMAC-SHA256}
//
// The MAC covers the kind, the queue, the run id, the due time and the args.
// River's InsertManyFast path (the COPY of `enqueue bulk`) runs insert
// middleware too, so it seals like the others. Dead-letter retry (`enqueue
// dead retry`, River's JobRetry) keeps the job's row, id and seal: the job
// passes its own claim again.
//
// # Encryption
//
// With FERRY_SEAL_ENCRYPT=true (Keys.WithEncryption), sealing also
// encrypts: the args are replaced by an envelope,
//
//	{"ferry_sealed": "<base64 of a 12-byte nonce and AES-256-GCM ciphertext>"}
//
// under a key derived (HKDF) from the sealing key, with the kind, queue,
// run id and due time as additional data, so that an envelope opens only in
// the job it was made for. The seal then has "e": true, the MAC covers the
// envelope (and that flag), and the verifier decrypts after the MAC, queue
// and claim checks hold, putting the args back in the job row before River
// decodes them for the kind's worker. An envelope that does not open is
// invalid. Anyone reading river_job (River UI, `enqueue jobs get`, `enqueue
// dead list`) sees the envelope, not the args. A worker decrypts whatever
// was sealed encrypted with one of its keys, whether or not it encrypts
// itself, so inserters may turn encryption on before or after the workers.
//
// River stores args as jsonb, which gives back its own text of them (keys
// reordered, spaces dropped, numbers as numeric: 1.50e1 becomes 15.0, the
// last of repeated keys kept). The MAC therefore covers a canonical form of
// the args' value, not their bytes: keys sorted, strings re-quoted by
// encoding/json, numbers as exact rationals (big.Rat), so that what the
// inserter sealed and what the worker reads back from jsonb encode alike.
// The tests check this against a real jsonb round trip. A MAC over
// Postgres's own text would need the text at insert (a round trip per job,
// or an UPDATE after the COPY); the canonical form costs a parse.
//
// # Verification
//
// Verifier is River worker middleware on the server's client: it runs
// before the kind's worker (and before River decodes the args), so a refused
// job never runs, not even once. In order:
//
//   - missing: no metadata.ferry_seal;
//   - invalid: a malformed seal, a key id this worker lacks, or a MAC that
//     does not match the job's kind and args (altered);
//   - queue: a good seal for another queue (the job was moved);
//   - stale: due more than FERRY_SEAL_REPLAY_WINDOW (168h) ago, and its run
//     id not claimed by this job (a retry of a job that started in time
//     passes);
//   - replayed: the run id is claimed by another job id (a copy written back
//     under a new id).
//
// A refused job is logged (`seal: job refused`, with job_id, kind, queue,
// reason, detail), counted (ferry_seal_refused_total{reason}), and returned
// a *RefusedError ("ferry: seal: job refused (reason): …") with its
// max_attempts lowered to its attempt in the worker's copy of the row:
// River then discards it at once (state discarded, the error as its last
// attempt's), a dead letter that `enqueue dead list` shows, never retried.
// River's JobCancel would end it too, but stores the error as
// "JobCancelError: …", not starting with "ferry: seal:".
//
// # The run-id claim
//
// The claim is a row of ferry_seal_run (run_id, job_id), made by an
// autocommitted INSERT … ON CONFLICT DO UPDATE … RETURNING job_id just
// before the worker runs. Claims of jobs that start at the same time share
// one statement and one commit (group commit: the first waiting claim runs
// the next batch, run ids sorted so that workers lock rows alike), since a
// commit per job capped a worker at a third of its unsealed rate. It is
// not made in River's transaction: River marks a job running in its fetch
// statement and completes it in a batch, later, in a transaction of its
// own; middleware sees neither. A claim committed
// before Work guarantees that once any job has started with a run id, no
// other job id ever runs with it (it gets back the holder's id: replayed),
// while the job's own retries (after an error, a crash, a rescue) pass. If
// the claim cannot be made (the database is unreachable), the attempt
// fails unrun and River retries it. Claims are deleted by the leader once
// older than the replay window: a copy of their job is stale by then.
//
// # Cost
//
// A claim is a write per job that River's own fetch and completion do not
// make; with the larger rows and the verification, a worker with keys
// worked 0.55 as many no-op jobs per second as one without in the bench
// (key sealed_worker_ratio; the target is 0.9). What would remove the
// write from the worker's path: a unique index on river_job over the run
// id (a copy cannot even be inserted while its original exists) and a
// trigger that moves the run id to ferry_seal_run when River deletes the
// row, so that the worker only reads.
//
// # What is detectable
//
// A worker with keys cannot see an inserter without keys directly; it sees
// the unsealed jobs it writes. At start it counts the unsealed jobs waiting
// in its queues (up to 1000) and warns when there are any; each one that
// arrives is refused as missing, and /readyz fails for 15 minutes after
// such a refusal, naming the count. Inserts into queues no worker with
// keys works, an inserter whose jobs all go elsewhere, and an inserter
// whose key the workers lack (refused as invalid, not missing) do not show
// as a missing seal; the metric's invalid count shows the last. Without
// keys the server warns at start: `seal: jobs are not sealed; whoever can
// write river_job can run any registered kind with any args`.
//
// What a seal does not do: hide args without FERRY_SEAL_ENCRYPT (anyone who
// can read river_job reads them), or stop a writer of river_job from deleting, delaying or
// cancelling jobs. Sealed is "ran only as ferry inserted it", no more.
package seal
