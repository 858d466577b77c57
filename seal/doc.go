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
// whose updates it relays) and embedders insert with) appends the seal to
// the job's tags, after the caller's, one string:
//
//	3.<key id prefix>.<run id: 96 random bits>.<due: unix seconds>.<HMAC-SHA256-128>.<queue>
//
// ("3e" for "3" when the args are encrypted; 65 characters for the
// default queue). Every byte of it is paid at each of a job's three rows
// (insert, fetch, completion: River copies each into WAL, its RETURNING
// results and a hash table), and a no-op job's row is two thirds the size
// without one, so the seal is as short as its guarantees allow: the MAC is
// HMAC-SHA256 truncated to its first 128 bits (RFC 4868's HMAC-SHA-256-128),
// the run id 96 random bits (two of a billion claims a week collide once
// in 10^11 weeks: the later would be refused as replayed), and the key is
// named by the first 16 bits of its id, which only choose the keys to try
// (two keys of a worker that share them are both tried).
//
// # Where the seal is
//
// A job's seal is the last of its tags that begins "3." or "3e." (Tag).
// River's tag format, [\w][\w-]+[\w], has no dot: no tag that River's
// client accepts (InsertOpts.Tags, `enqueue job --tag`) is taken for a
// seal. River UI, `enqueue jobs list|get` and `enqueue dead list` show it
// among the job's tags. The database reads the same tag (ferry_seal_tag,
// migration 021), which matters: the run id it claims must be that of the
// seal the worker checks, or a copy given a second seal would pass.
//
// Seals were in metadata.ferry_seal until migration 021. River indexes
// metadata with GIN (river_job_metadata_index, jsonb_ops) and no tag, and
// that index took each row version's seal as one more entry, unique to the
// job: a sealed worker spent a fifth more Postgres CPU per job than an
// unsealed one, and the index grew by an entry a job. A job without a seal
// tag is checked by the seal of its metadata, as builds before wrote it:
// version 3's string, version 2's (2.<key id>.<run id>.<due>.<0|1>.<HMAC-SHA256>.<queue>,
// 102 characters) or version 1's object {"v": 1, "k", "r", "q", "d", "m"};
// jobs such builds left waiting run after an upgrade. Builds before seal
// tags refuse a job sealed in a tag as missing, and builds before version
// 3 refuse version-3 seals as invalid: moving from such a build stops
// every worker and inserter together rather than rolling (a worker seals
// too: its scheduler and relay).
//
// The MAC covers the kind, the queue, the run id, the due time and the args.
// River's InsertManyFast path runs insert middleware too, and so does
// jobs.Inserter.EncodeCopy (the COPY of `enqueue bulk`): both seal like
// the others. Dead-letter retry (`enqueue
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
// the job it was made for. The seal's version is then "3e", the MAC covers
// the envelope (and that flag), and the verifier decrypts after the MAC, queue
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
//   - missing: no seal tag, and no metadata.ferry_seal;
//   - invalid: a malformed seal, a key id this worker lacks, or a MAC that
//     does not match the job's kind and args (altered);
//   - queue: a good seal for another queue (the job was moved);
//   - replayed: the database marked the row (below): its run id is held
//     by another job id (a copy written back under a new id, or a seal
//     copied onto another row), or by a job since deleted (a copy written
//     back, even under the deleted job's id);
//   - stale: the row was written (its run id claimed) more than
//     FERRY_SEAL_REPLAY_WINDOW (168h) after the job was due, or the job is
//     due more than the window ago and starts for the first time (attempt
//     1). A retry of a job that started in time passes.
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
// The database claims a sealed job's run id in the transaction that writes
// the job (migration 014), and tells the worker what it found in the job's
// own row, so that the worker checks a job without a query or a write of
// its own: Check reads nothing but the row River fetched.
//
//   - On insert, a statement-level trigger (put on river_job by Arm, which
//     every worker with keys calls at start) claims the run ids of all the
//     statement's sealed rows in one INSERT … SELECT into ferry_seal_run
//     (run_id, job_id, due): a COPY of a million sealed jobs claims them in
//     a few statements, not a million.
//   - On an UPDATE that changes a row's id, seal or mark, a row-level
//     trigger claims the row's run id again for its id. Its WHEN only asks
//     whether the id, the tags or the metadata changed (false for River's
//     fetch and completion; Postgres prepares a WHEN again at each
//     statement, so it is kept small, migrations 020 and 021), and its
//     function tests the rest.
//   - On delete, a statement trigger marks the deleted jobs' claims gone.
//
// When the run id was held already by another job id, or by a deleted job,
// or the claim is made more than an hour after the job was due, the row
// gets metadata.ferry_seal_claim = {"job": holder, "at": claim time,
// "gone": bool}; a mark written by hand is removed. The verifier reads the
// mark: another holder or gone is replayed, a claim later than the replay
// window after due is stale.
//
// A copy of a committed job always finds its original's claim, whichever
// of them starts first: the original runs, its retries (after an error, a
// crash, a rescue) pass, and no copy ever runs, not even once. Sealed jobs
// written before any worker with keys armed the database are claimed, in
// id order, when one does, and any copy among them marked. Claims are
// deleted by the leader (Cleaner, hourly, in batches) once their job was
// due more than the replay window and an hour ago: a copy written back
// after that claims anew, late, is marked, and is refused as stale.
//
// ferry_seal_run has no index on the time (each claim is written by an
// insert of river_job, which would pay for it), so the cleanup reads the
// table: each of its statements deletes the expired claims of the next
// 128 pages (1 MB) through a TID range scan, from the first page to the
// last the table had when the pass began. A pass reads each page once,
// and a batch costs its pages and what it deletes whatever came before
// it. The first form deleted 10,000 claims a statement, found by a scan
// from the start of the table: each batch read again the rows the ones
// before had deleted, dead until a vacuum, so that a pass over millions
// of claims cost the square of them (tools/bench -mode sealcleanup measures
// the time per 100,000 claims deleted, first batches against last).
//
// The first form of this design claimed at start, in an autocommitted
// write per job (group-committed) just before the worker ran, as the issue
// that asked for seals put it ("claimed in the same transaction as the
// job's start or completion", which River's middleware cannot reach): a
// write and a commit per job that River's own fetch and completion do not
// make, which held a sealed worker to 0.59 of an unsealed one.
//
// # Cost
//
// Measured with `go run ./tools/bench -mode sealed` (5 rounds, medians of the
// rounds' ratios, on a shared 2-core machine whose runs swing by 0.05): a
// worker with keys works 0.90 to 0.97 as many no-op jobs per second as one
// without with a backlog of 50,000 (sealed_worker_ratio, target 0.9; five
// runs, median 0.92), and 0.93 with 200,000. With the seal in metadata, before migration 021, it
// was 0.71 to 0.91 and 0.76: River's GIN index on metadata took each row
// version's seal as a unique entry (with that index dropped, a sealed
// worker spent as much Postgres CPU per job as an unsealed one). The MAC
// over the canonical args is 1.5 µs (BenchmarkCheck); the rest is the
// seal's bytes in River's rows. The claim is paid by inserters:
// jobs.Inserter with keys inserts one job per transaction at 0.71 to 0.76
// of the unsealed rate and COPYs at 0.43 to 0.48 (keys
// sealed_insert_ratio and sealed_bulk_ratio; without the claim, 0.86 and
// 0.79 to 0.85: the seal itself, 2.5 µs a job in Go, BenchmarkSeal, and
// the larger rows).
// A deployment without keys has no insert trigger of this design.
//
// # What is detectable
//
// A worker with keys cannot see an inserter without keys directly; it sees
// the unsealed jobs it writes. At start it counts the unsealed jobs among
// the next 1000 available jobs of each of its queues (in River's fetch
// order, through its fetch index: a bounded read whatever the backlog) and
// warns when there are any; each one that
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
//
// # Module
//
// seal is a Go module of its own (github.com/ferryq/ferry/seal), like jobs,
// outbox, locks and broadcast: a service that requires it gets River
// and pgx in its module graph, never the worker's requirements (River UI,
// Prometheus, OpenTelemetry, the CLI).
package seal
