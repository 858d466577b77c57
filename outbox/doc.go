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
// # Relaying
//
// A Relay runs in every worker process. Woken by the trigger's NOTIFY (with
// a polling fallback), it claims pending messages oldest first with FOR
// UPDATE SKIP LOCKED, in batches, and in the same transaction records one
// delivery per (message, route) in ferry_outbox_delivery, inserts the
// outbox.deliver jobs (River's InsertManyTx) and marks the messages relayed.
// Relays on many replicas share the work; none relays a message twice. A
// topic with no route is an error made visible: the message is stuck with
// "no route for topic", never a silent wait.
//
// # Delivering
//
// Routes map a topic to receivers: HTTP webhooks (from the config file) or
// Go handlers (from code). A webhook gets a POST of the payload with
// Ferry-Event-Id, Ferry-Topic, Ferry-Route and Ferry-Signature (HMAC-SHA256
// over the timestamp and the body with the route's secret). 2xx is
// delivered; 408, 429, 5xx and transport errors retry on the backoff table
// 5, 15, 60, 300, 900, 3600 s (then 3600) with jitter; any other status is
// stuck at once; after the maximum attempts (FERRY_OUTBOX_MAX_ATTEMPTS,
// default 24) the delivery is stuck. Stuck rows keep their last error and
// stay until Reset (enqueue outbox reset) puts them back. Nothing is deleted
// by delivery.
//
// # Receiving once
//
// The wire is at least once. Receive records (consumer, event id) in
// ferry_outbox_received inside the receiver's transaction and says whether
// it is the first time; a Go handler runs inside that transaction, which
// also completes the delivery's River job (river.JobCompleteTx), so its
// effect happens once. HTTP receivers keep their own UNIQUE on the event id;
// Verify checks a request's signature and timestamp for them.
package outbox
