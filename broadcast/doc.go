// Package broadcast tells every process something now: a setting changed,
// a board to refresh, a leader that changed. Messages are published on
// Postgres (NOTIFY), inside the caller's transaction if it likes, and
// delivered at most once to the subscribers of their channel in every
// process; a subscriber that may have missed some gets a gap instead of a
// silent hole, and re-reads its state.
//
//	b, err := broadcast.New(broadcast.Config{Pool: pool, Keys: keys})
//	defer b.Close()
//	sub, err := b.Subscribe(ctx, "board:42")
//	for {
//		ev, err := sub.Next(ctx)
//		if err != nil {
//			return err
//		}
//		if ev.Gap {
//			sendState(ctx) // messages of ev.Channel may have been missed
//			continue
//		}
//		send(ev.Data)
//	}
//
// Elsewhere, in the transaction that changes the board:
//
//	err := b.PublishTx(ctx, tx, "board:42", map[string]any{"card": 7, "moved_to": "done"})
//
// Work that must happen goes to a job or the outbox, never to a broadcast.
//
// # Delivery
//
// Publish sends a NOTIFY on its own; PublishTx sends it in the caller's
// transaction, so Postgres delivers it when, and only if, that transaction
// commits. Every listening session receives every committed NOTIFY, in
// commit order, as long as it stays connected.
//
// # One session per process, one Postgres channel
//
// A Broker holds at most one LISTEN session, opened by the first
// Subscribe and named ferry-broadcast:<host>:<pid> in pg_stat_activity,
// whatever its number of subscriptions; it fans the notifications out to
// them in memory. Every ferry channel travels on the one Postgres channel
// ferry_broadcast, the ferry channel in the payload, rather than one
// Postgres channel per ferry channel: Postgres channel names are
// identifiers of at most 63 bytes (ferry channels go to 128 characters
// with '.', ':' and '-'), a LISTEN per channel would have to be issued on
// the live session as subscriptions come and go, and every reconnect would
// have to replay them. The cost is that each process receives the
// messages of channels nobody in it subscribes to, and drops them in
// memory; broadcast is for small, rare-ish messages.
//
// # Gaps
//
// Delivery is at most once, and every way a message can be missed turns
// into a gap, an Event with Gap set, on the channels concerned:
//
//   - the session dropped: it reconnects with a backoff (500 ms doubling to
//     5 s), and once it listens again every subscription gets a gap on each
//     of its channels;
//   - a subscription fell behind: its queue holds QueueSize messages, and
//     a message that finds it full is dropped and counted (reason
//     "overflow") and a gap of its channel is queued after the messages
//     before it (consecutive gaps of one channel are one);
//   - a large message's row was pruned before it was read (reason
//     "expired"): a gap of its channel.
//
// Postgres does not lose a NOTIFY sent to a live session, so there is no
// sequence number to check: a per-publisher sequence could not tell a
// missed message from a rolled-back PublishTx or from two transactions
// committing in the other order. The losses above are all local and seen
// where they happen. A publisher whose NOTIFY Postgres cannot queue (its
// notification queue of 8 GB is full) gets the error at commit.
//
// # Limits
//
// A channel is 1 to 128 letters, digits and _.:- characters; a message is
// JSON of at most 64 KiB. Bad input is an error wrapping ErrInvalidChannel
// or ErrTooLarge, and nothing is sent. A NOTIFY payload must be shorter than
// 8,000 bytes: a larger message is stored in ferry_broadcast_message
// (migration 012), in the same statement as a NOTIFY carrying a reference
// to its row, and each process reads the row when the reference arrives.
// The rows are pruned after Retention (default 5 minutes), by publishers of
// large messages at most once per half retention.
//
// # Signing
//
// With Keys (FERRY_BROADCAST_KEYS: comma-separated base64, each at least
// 32 bytes, the same in every process; ParseKeys reads it), each message
// carries an HMAC-SHA256 of its channel, its publication time and its
// data, with the first key. A receiver accepts a message whose signature
// matches any of its keys, so a key is rotated by adding the new one second
// everywhere, then first, then removing the old one. A message without a
// signature or with a wrong one (written by whoever can NOTIFY on the
// database) is dropped and counted by reason ("unsigned", "forged"):
// Dropped, and ferry_broadcast_dropped_total{reason} in a worker.
//
// # Replays
//
// A genuine envelope captured off the channel can be NOTIFYed again by any
// role that can connect. With Keys, a receiver accepts a message only
// inside a freshness window: published at most ReplayWindow ago (default 2
// minutes) and at most MaxClockSkew ahead of its clock (default 30 s);
// outside it the message is dropped as "stale". Within the window each
// Broker remembers the signature (the MAC's bytes, which base64 can spell
// more than one way) of every message it accepted, and drops a copy as
// "replayed". A signature is forgotten once its message is older than the
// window, when a copy would be stale: the memory holds the signatures of
// one window's messages, swept every quarter window. A message's
// signature covers its channel, time and data, and a Broker dates its
// messages a microsecond apart at least, so two messages of one publisher
// never share one; two processes publishing the same data on the same
// channel in the same microsecond would, and the second is dropped as a
// replay (Postgres itself folds identical NOTIFYs of one transaction).
// The window counts from the publication: a PublishTx whose transaction
// commits later than ReplayWindow after the call is dropped as stale.
// Without Keys nothing is checked: whoever can NOTIFY can forge, so
// nothing is gained by refusing copies.
//
// # Without a database
//
// A Broker with no Pool is an in-process bus with the same API: messages
// reach the subscribers of this process only, at once. PublishTx returns
// ErrNoDatabase there. It serves tests and single-process programs.
//
// # Module
//
// broadcast is a Go module of its own (github.com/ferryq/ferry/broadcast),
// like jobs, outbox, seal and locks: a service that requires it gets River
// and pgx in its module graph, never the worker's requirements (River UI,
// Prometheus, OpenTelemetry, the CLI).
package broadcast
