package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/jobs"
)

// SendArgs are the args of telegram.send: one text message to one chat,
// sent with sendMessage by SendWorker, outside any transaction. A Router
// inserts one per reply, in the delivery's transaction.
//
// Bot is the bot's name from the config, never its token: args are stored
// in river_job and shown by the admin surface.
type SendArgs struct {
	Bot    string `json:"bot" river:"unique"`
	ChatID int64  `json:"chat_id"`
	Text   string `json:"text"`
	// UpdateID is the update answered (0 for a message that answers none).
	// A Router's replies are unique by bot and update: a second insert for
	// the same update returns the first job.
	UpdateID int64 `json:"update_id,omitempty" river:"unique"`
}

// Kind implements river.JobArgs.
func (SendArgs) Kind() string { return "telegram.send" }

// Validate checks the args; the enqueue CLI and jobs.Inserter call it.
func (a SendArgs) Validate() error {
	switch {
	case a.Bot == "":
		return errors.New("telegram.send: bot is empty")
	case a.ChatID == 0:
		return errors.New("telegram.send: chat_id is 0")
	case a.Text == "":
		return errors.New("telegram.send: text is empty")
	}
	return nil
}

// SendWorker works telegram.send with the Client of the job's bot.
//
// Outcomes: sent, the job completes; 429, the job is snoozed for
// Telegram's retry_after (a snooze counts no attempt) or, without one,
// retried; 5xx, 401, an answer that is not the Bot API's and transport
// errors (timeouts included) fail the attempt and River retries it on its
// backoff; any other 4xx (a text over 4096 characters, a chat that blocked
// the bot) cancels the job at once, as does a bot this worker has no client
// for. The errors River stores never contain the token (the Client scrubs
// them).
//
// A reply is sent at least once: a worker that dies after Telegram took
// the message but before River recorded the job completed sends it again
// when the job is rescued.
type SendWorker struct {
	river.WorkerDefaults[SendArgs]

	clients map[string]*Client
	log     *slog.Logger
}

var _ river.Worker[SendArgs] = (*SendWorker)(nil)

// NewSendWorker returns a worker that sends through clients, by bot name.
// logger defaults to slog.Default().
func NewSendWorker(clients map[string]*Client, logger *slog.Logger) *SendWorker {
	if logger == nil {
		logger = slog.Default()
	}
	return &SendWorker{clients: clients, log: logger}
}

// Kind describes telegram.send for the job registry.
func (w *SendWorker) Kind() jobs.Kind {
	return jobs.Define[SendArgs](w, river.QueueDefault, "sends one Telegram message (sendMessage); 429 waits retry_after, 5xx and transport errors retry, other 4xx cancel")
}

// Timeout gives River's job context a little more than the call's own
// bound, so the call's timeout (a retried attempt) wins the race.
func (w *SendWorker) Timeout(*river.Job[SendArgs]) time.Duration { return sendTimeout + 5*time.Second }

// Work implements river.Worker.
func (w *SendWorker) Work(ctx context.Context, job *river.Job[SendArgs]) error {
	a := job.Args
	if err := a.Validate(); err != nil {
		return river.JobCancel(err)
	}
	client, ok := w.clients[a.Bot]
	if !ok {
		return river.JobCancel(fmt.Errorf("telegram.send: bot %q is off on this worker (unknown, or its token variable is unset)", a.Bot))
	}
	err := client.SendMessage(ctx, a.ChatID, a.Text)
	if err == nil {
		return nil
	}
	err = fmt.Errorf("telegram.send: bot %s: %w", a.Bot, err)
	var apiErr *APIError
	switch {
	case errors.As(err, &apiErr) && apiErr.Kind() == KindRateLimited && apiErr.RetryAfter > 0:
		w.log.Warn("telegram: send rate limited; waiting", "bot", a.Bot, "job_id", job.ID, "retry_after", apiErr.RetryAfter)
		return river.JobSnooze(apiErr.RetryAfter)
	case errors.As(err, &apiErr) && apiErr.Kind() == KindBadRequest:
		return river.JobCancel(err)
	}
	return err
}
