// Package telegram is ferry's Telegram consumer: each configured bot's
// getUpdates long poll runs on the leader only, and every update is stored
// durably, as an outbox message, before Telegram is told it was received.
//
// # Why a leader runnable
//
// A bot token allows exactly one getUpdates consumer: a second one makes
// Telegram answer 409 Conflict to both, and updates are dropped. A Poller's
// Run is therefore a leader runnable (election.Runnable): it runs in the one
// process that holds the election lock and is cancelled within one leader
// tick of losing it, in-flight long poll included (the request is bound to
// Run's context).
//
// # Storing a batch
//
// Run reads the bot's next_offset from ferry_telegram_offset (0 when none),
// then loops on getUpdates(offset). Each non-empty batch is stored in one
// transaction fenced by the leader's term (Leader.Fence):
//
//   - one outbox message per update: topic telegram.<bot>, dedup_key the
//     update_id, payload the update's JSON as Telegram sent it (only
//     update_id is decoded, so a field of an unexpected type cannot fail
//     anything);
//   - the bot's row of ferry_telegram_offset: next_offset = the batch's
//     greatest update_id + 1, last_update_id, updates_stored, term.
//
// Only after the commit does the next getUpdates send the new offset, which
// is what acknowledges the batch to Telegram. A crash, a failed commit or a
// demotion before that point leaves the batch unacknowledged: the next
// leader reads the stored offset and Telegram sends the batch again. Its
// updates that were stored already are duplicates of their dedup key and
// are skipped, so a failover loses nothing and doubles nothing.
//
// An update that cannot be an outbox message (no update_id, a payload over
// outbox.MaxPayloadBytes, a value Postgres refuses, each in a savepoint of
// its own) is kept in ferry_telegram_malformed (raw text up to 64 KiB, and
// why) once, and the updates after it are stored as usual. Its update_id,
// when it has one, still counts for the offset. A batch in which no update
// has an id cannot be acknowledged; the poller keeps it once, logs and
// waits ErrorBackoff before polling again.
//
// Telegram restarts update_ids at a random number after a week without
// updates, so next_offset follows the batch rather than only ever growing,
// and an update whose id was used before by a different update is stored
// under the id suffixed with a hash of its content instead of being taken
// for a duplicate.
//
// # Errors
//
// A getUpdates that fails is retried in Run: after ErrorBackoff (default
// 5s) for a server error, a non-ok answer or a transport error; after
// Telegram's retry_after for 429; after AuthBackoff (default 60s) for 401
// (logged as "telegram: bad token (401); polling paused") and 409 (logged
// as "telegram: conflict (409): another getUpdates consumer or a webhook is
// set for this bot"). A batch that cannot be stored (the fence refused, the
// database failed) ends Run with the error; the elector restarts it with
// backoff while it leads, and Run reads the stored offset again.
//
// # Receivers
//
// Updates reach receivers through outbox routes on topic telegram.<bot>:
// webhooks from the config file, or Go handlers. Router is a small command
// router for Go handlers ("/start", "/help a b", "/cmd@BotName").
//
// # Replies: no network call in a transaction
//
// A Go handler runs in the delivery's transaction, which holds a pooled
// connection until it ends. A Router therefore does not call sendMessage
// there: it inserts a telegram.send job (SendArgs: the bot's name, the
// chat, the text, the update answered) in that transaction, so the reply
// exists if and only if the handler's effect commits, and SendWorker sends
// it afterwards with no transaction open. The job is unique by bot and
// update_id, and the handler runs once per update (outbox.Receive), so a
// reply is queued once; it is sent at least once (a worker that dies
// between Telegram's answer and River's record sends it again). 429 waits
// Telegram's retry_after, 5xx and transport errors are retried on River's
// backoff, any other 4xx cancels the job. The args name the bot, never the
// token; the worker finds the Client by name, so telegram.send runs only
// where the bot is on (it is cancelled elsewhere, saying so).
//
// # Secrets
//
// Bot API URLs contain the token (https://api.telegram.org/bot<token>/...).
// The token never appears in a log line, an error string, a metric, a
// BotStatus or a stuck delivery's last error: the client never lets a
// *url.Error (which quotes the URL) out, scrubs the token ("bot<token>",
// the bare token and its escaped forms) from every error and every
// description the server echoes, and the poller and Router scrub again
// whatever reaches their status and errors. Metrics are labelled by the
// bot's name only.
//
// # Why a client of ferry's own
//
// ferry needs to decide when an offset is acknowledged: only after the
// batch is committed. github.com/go-telegram/bot (v1.19.0), the maintained
// client that lets one set the server URL, keeps the offset in memory in an
// unexported polling loop and advances it before its handler has stored the
// update, so a failed write is acknowledged and lost; and its getUpdates
// method is not exported. So Client is a small client of ferry's own for
// the two calls it needs, getUpdates and sendMessage, against any server URL
// (FERRY_TELEGRAM_API_URL, default https://api.telegram.org). It returns
// each update's raw JSON rather than decoding it into structs, so that one
// field of an unexpected type cannot fail a batch, and the payload stored
// is the update as Telegram sent it.
//
// # Connections
//
// The poller uses ordinary pooled transactions; it holds no session state,
// so the note on transaction-mode poolers (package election) does not apply
// to it: only the election's lock connection needs a direct one.
//
// # Metrics
//
// With PollerConfig.Registerer set, each poller reports, labelled by bot:
// ferry_telegram_polling (1 while this process consumes the bot),
// ferry_telegram_updates_stored_total, ferry_telegram_last_update_id and
// ferry_telegram_errors_total{kind}. OffCollector reports a bot whose token
// is unset.
package telegram
