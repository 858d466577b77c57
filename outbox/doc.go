// Package outbox is ferry's transactional outbox: messages written in the
// caller's own transaction (from Go or plain SQL) are relayed into River
// jobs that deliver them, at least once, with the event id that lets the
// receiver keep the effect to once.
//
// # Writing
//
// Add inserts into ferry_outbox inside the caller's pgx.Tx: the message
// exists if and only if the caller's transaction commits. Services in other
// languages write the same table with plain SQL; the database enforces the
// rules for both (a topic of letters, digits and _.:- up to 128 characters,
// a payload of at most 256 KiB, a dedup_key unique per topic), and an insert
// trigger notifies the relays.
//
//	INSERT INTO ferry_outbox (topic, payload, dedup_key)
//	VALUES ('order.placed', '{"order_id": 42}', 'order-42');
//
// A message written in a traced request keeps its W3C trace context (Add
// stores the context's span when the service imports the otelferry module;
// a plain-SQL writer may set the traceparent and tracestate columns, whose
// format the database checks): the relay's span of it (RelayConfig.Tracer),
// its delivery jobs and the webhook requests (DeliverConfig.Tracer; their
// traceparent header) join that trace.
//
// # Relaying
//
// A Relay runs in every worker process. Woken by the trigger's NOTIFY (with
// a polling fallback), it claims pending messages oldest first with FOR
// UPDATE SKIP LOCKED, in batches, and in the same transaction records one
// delivery per (message, route) in ferry_outbox_delivery, inserts the
// outbox.deliver jobs (River's InsertManyTx) and marks the messages relayed.
// Relays on many replicas share the work; none relays a message twice. The
// relay's transaction commits asynchronously (synchronous_commit off): no
// delivery starts before River's fetch commits, synchronously, and that
// commit's flush covers the relay's, so a crash can only lose a relay
// whose deliveries had not started, and its messages are relayed again.
//
// A route's queue may be bounded (package jobs, "Bounded queues"). A
// message whose delivery jobs its route's queue refuses as full stays
// pending, with last_error "waiting for room: queue full: …"
// (ErrWaitingForRoom), and is relayed once the queue has room, at the
// latest on the next poll; it is never stuck for this. A refused statement
// aborts its transaction, so when one of the batch's queues is bounded the
// relay inserts the batch's jobs in a savepoint, and on a refusal each
// message's jobs in a savepoint of their own: the messages to other queues
// go. (Without a bound, no savepoint: two round trips fewer. A bound set
// in between aborts the transaction, and the batch is relayed again at
// once, with savepoints.) Its claims leave out the topics of
// routes whose queues ferry_queue shows at their bound, so waiting
// messages never fill the batches that messages to other routes need. A
// message is relayed whole: with two routes, one of them full, it waits
// for both.
//
// A relay transaction reads the live routes and the bounded queues in the
// round trip of its claims, which filter by what the transaction before
// read; each claimed message is routed by what its own transaction read.
// When that would let the claims take more (a topic routed since, a queue
// with room again), the relay passes again at once. So a transaction
// takes five round trips without a bound: BEGIN, the state with the
// claims, River's insert, the record, COMMIT.
//
// # Routes across replicas
//
// Replicas may differ in their routes: during a rolling deploy that adds a
// route, some workers have it and some do not yet. Were each relay to use
// its own configuration only, a message would reach the new route or not
// depending on which replica relayed it, and a delivery would fail on a
// worker that lacks its route. So:
//
//   - Each worker declares the routes it delivers (Publish) in
//     ferry_outbox_route at start, keyed by its River client id, the key of
//     its ferry_worker row. A declaration counts while the worker is alive,
//     judged as internal/liveness judges it: some session holds the worker's
//     lock (911000003, ferry_worker.id) and the rescuer has not declared it
//     dead. Never a heartbeat's age: a worker that stops, is killed or is
//     cut off loses its routes when its session ends. Publish deletes the
//     declarations of stopped and dead workers.
//   - The relay routes each message to the union, by route name, of its own
//     routes and those of every live worker (LiveRoutes), whichever replica
//     it runs on; it needs only the names.
//   - Each delivery job goes to its route's own River queue, QueueFor(name),
//     and a worker's River client works the queues of exactly the routes it
//     has (with Route.Workers workers each, or the process's default for
//     routes that leave it unset). A delivery therefore
//     runs only where its route is configured; it waits in its queue, never
//     stuck, while no such worker runs. A derived queue name is
//     deterministic, valid for River (64 characters of [a-z0-9] with single
//     _ or -) and, through 80 bits of SHA-256, unique in practice; it keeps a
//     readable form of the name for River UI.
//   - Jobs in the shared queue Queue ("outbox": relayed by ferry before
//     routes had queues, or inserted by hand) are forwarded to their
//     route's queue in one transaction (a new job, recorded as the
//     delivery's job, and the old one completed), not attempted there; so a
//     rolling upgrade leaves none behind. A delivery that a worker without
//     its route still fetches from the route's own queue (only a River
//     client configured by hand can) is snoozed with last_error "waiting for
//     a route: route not configured on this worker", never stuck.
//   - A message whose topic no live worker routes waits: it stays pending
//     with last_error "waiting for a route" (ErrWaitingForRoute) from
//     route_wait_since, Stats counts it as "waiting for a route", and it is
//     relayed as soon as a worker declares a route for its topic (Publish
//     notifies the relays). After RouteGrace (FERRY_OUTBOX_ROUTE_GRACE,
//     default 5m) without one it is stuck with "no route for topic": visible,
//     never a silent wait. Waiting messages are out of the relay's claim
//     index, so a backlog of them never slows the relaying of others.
//   - A pending delivery whose route no live worker declares any more (a
//     route removed from every worker by a deploy) waits in its route's
//     queue for the same grace, from the first leader sweep that finds the
//     route gone (RouteSweeper, route_wait_since on the delivery); then it
//     is stuck with ErrRouteGone and its job cancelled in the same
//     transaction.
//   - Reset puts a stuck delivery back in its route's queue, and a message
//     stuck for want of a route back to the relay, with a new grace.
//
// The union is taken at relay time: a message relayed before a route
// appeared does not get a delivery to it later.
//
// # Delivering
//
// Routes map a topic to receivers: HTTP webhooks (from the config file) or
// Go handlers (from code). A webhook gets a POST of the payload signed per
// Standard Webhooks (www.standardwebhooks.com): webhook-id (the event id),
// webhook-timestamp and webhook-signature (SignStandard), so a receiver in
// any language verifies it with that project's library; and, for receivers
// written before those, Ferry-Event-Id, Ferry-Topic, Ferry-Route and
// Ferry-Signature (Sign). A route's secrets (ParseSecrets: whsec_ or raw,
// several while one is rotated) each sign every request. 2xx is delivered;
// 408, 429, 5xx and transport errors retry on the backoff table 5, 15, 60,
// 300, 900, 3600 s (then 3600) with jitter, or when a 429's or 503's
// Retry-After says; any other status is stuck at once (410 Gone with its
// reason); after the maximum attempts (FERRY_OUTBOX_MAX_ATTEMPTS, default
// 24) the delivery is stuck. Stuck rows keep their last error and stay
// until Reset (enqueue outbox reset) puts them back. Nothing is deleted by
// delivery.
//
// # Ordered delivery
//
// Messages without an ordering key are delivered in parallel, as fast as
// the route's workers go. Messages of one topic written with the same
// ordering key (WithOrderingKey, or the ordering_key column from SQL: 1 to
// 256 characters) are delivered to each route in message order, one at a
// time: a message's delivery starts once the one before it is delivered
// to that route, so each key's first successful arrivals at a receiver
// come in order (retries of one message may repeat it, never overtake
// it). Keys are independent: a slow or failing key never delays another.
// The order is the order the relay relays them in (chain_seq, set as it
// relays them): a key's messages written in turn, or in one transaction,
// go in id order; of two transactions that write the same key at once,
// the one whose message the relay sees first goes first. A message with
// a lower id that commits after a later one of its key was relayed (or
// started, or delivered) goes after it, never beside it; two that are
// both committed when the relay claims them go in id order. For this the relay, which
// sees a key's messages once committed, gives those it relays in one
// transaction one place (a value of the ids' sequence, ties by id) under
// their chains' locks, and leaves a key's messages pending, for a pass
// 10 ms later, while another transaction holds one of its chains' locks
// or a message of the key with a lower id is pending (claimed by another
// relay: relayed first, it takes the earlier place).
//
// Each (route, topic, key) is a chain, and at most one delivery of a chain
// has a River job, whatever the commit order of its writers. The relay
// gives a job to a chain's first undelivered delivery and records the
// later ones without one (job_id NULL, "waiting for its turn" in Stats
// and List). A webhook delivery's job,
// its message delivered, goes on with its chain: in the same round trip
// and transaction that records the delivery, it claims the chain's next
// delivery if it waits for its turn (the delivery's job_id becomes the
// job's), and posts it; and so on for DeliverConfig.ChainBudget (5 s), so
// that a chain's links cost no job, fetch, completion or queue wait each.
// A claimed delivery that fails snoozes the job until its retry (River
// counts no attempt; the delivery counts its own, to MaxAttempts), and
// the job, run again, or rescued after its process died, resumes with it;
// a claimed delivery stuck ends the job. A claimed delivery's request
// carries its own message's trace context (Tracer.Within), not the job's.
// Past the budget, or for a Go handler route, the delivery that completes
// hands the chain's turn on: to its process's relay (DeliverConfig.Advance,
// Relay.Advance), which starts the next delivery of every chain handed to
// it meanwhile in one transaction and one River insert (a transaction, and
// an insert notification, per delivery would queue every commit on
// Postgres's notification lock); with no relay to hand it to, in the
// transaction that records it delivered. Starting a chain's delivery
// holds the chain's advisory transaction lock; the relay takes it too, or
// leaves the messages of a chain another holds pending, so relays on many replicas and the deliveries never start two
// deliveries of one chain, and never miss one. A release pass (ReleaseOnce)
// starts a chain whose turn came more than PollInterval ago without a job
// (a turn lost with a killed process, a full queue, a predecessor deleted
// by hand). It reads every waiting delivery, so it runs on one process
// (RelayConfig.ReleaseElsewhere and Relay.RunReleases: ferry's worker
// runs it on its leader; by default each relay runs its own, one at a
// time), every ReleaseInterval (5 s) or 5 times as long as its last
// pass took, whichever is longer.
//
// A stuck delivery blocks its chain: the later deliveries wait, counted as
// StatusBlocked ("blocked") by Stats and selected by List's Status
// "blocked", until Reset of the stuck message gives it a new job; once it
// is delivered the chain goes on. A retried delivery holds its chain for
// its backoff (5 s, 15 s, 60 s, …): a receiver that answers 429 or 503 with
// Retry-After sets the pace. The retry of a job's own message goes ahead of the fresh deliveries
// in its route's queue (River priority 1; every delivery job is inserted
// at 2): its key waits on it, and its message is older than theirs. A
// queue with more ready deliveries than workers would otherwise keep the
// retry waiting behind all of them each time, and the keys with the most
// retries would finish long after the others.
//
// # Receiving once
//
// The wire is at least once. Receive records (consumer, event id) in
// ferry_outbox_received inside the receiver's transaction and says whether
// it is the first time; a Go handler runs inside that transaction, which
// also records the delivery delivered, so its effect happens once (a job
// run again after that commit, its River completion lost with its worker,
// finds the delivery delivered and does nothing). The handler's
// transaction reads the message too, in Receive's round trip (a
// pipeline): the handler starts two round trips after its worker gets the
// job, not three. HTTP receivers keep
// their own UNIQUE on the event id; Verify checks a request's signature
// (the standard headers, or Ferry-Signature from an older worker) and
// timestamp for them.
//
// # Module
//
// outbox is a Go module of its own (github.com/ferryq/ferry/outbox), like
// jobs, seal, locks and broadcast: a service that requires it gets River
// and pgx in its module graph, never the worker's requirements (River UI,
// Prometheus, OpenTelemetry, the CLI). A service that traces with
// OpenTelemetry imports github.com/ferryq/ferry/otelferry too, for Add to
// store its spans' context.
package outbox
