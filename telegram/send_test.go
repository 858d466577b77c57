package telegram

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/telegramtest"
	"github.com/ferryq/ferry/jobs"
)

func TestSendArgs_Validate(t *testing.T) {
	t.Parallel()
	require.NoError(t, SendArgs{Bot: "desk", ChatID: 1, Text: "hi"}.Validate())
	require.ErrorContains(t, SendArgs{ChatID: 1, Text: "hi"}.Validate(), "bot is empty")
	require.ErrorContains(t, SendArgs{Bot: "desk", Text: "hi"}.Validate(), "chat_id is 0")
	require.ErrorContains(t, SendArgs{Bot: "desk", ChatID: 1}.Validate(), "text is empty")
	require.NoError(t, jobs.CheckArgs(SendArgs{Bot: "desk", ChatID: 1, Text: "hi"}))
}

func TestSendWorker_Work(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		api    *telegramtest.BotAPI
		worker *rivertest.Worker[SendArgs, pgx.Tx]
		tx     pgx.Tx
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		api := newFakeAPI(t)
		w := NewSendWorker(map[string]*Client{"desk": fakeClient(api)}, slog.New(slog.DiscardHandler))
		require.Equal(t, "telegram.send", w.Kind().Name)
		tx, err := pgtest.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		t.Cleanup(func() { _ = tx.Rollback(t.Context()) })
		return &testBundle{
			api:    api,
			worker: rivertest.NewWorker(t, riverpgxv5.New(nil), &river.Config{}, river.Worker[SendArgs](w)),
			tx:     tx,
		}
	}

	// work works one telegram.send job to the end of its first attempt.
	work := func(t *testing.T, b *testBundle, args SendArgs) (*rivertest.WorkResult, error) {
		t.Helper()
		res, err := b.worker.Work(t.Context(), t, b.tx, args, nil)
		require.NotNil(t, res)
		for _, e := range res.Job.Errors {
			require.NotContains(t, e.Error, testToken, "River stores no token")
		}
		return res, err
	}

	hi := SendArgs{Bot: "desk", ChatID: 42, Text: "hi", UpdateID: 7}

	t.Run("Sent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := work(t, b, hi)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCompleted, res.EventKind)
		require.Equal(t, []telegramtest.Message{{ChatID: 42, Text: "hi"}}, b.api.Sent())
	})

	retried := map[string]telegramtest.Reply{
		"ServerError":       telegramtest.APIError(http.StatusInternalServerError, "Internal Server Error for bot"+testToken, 0),
		"RateLimitedNoWait": telegramtest.APIError(http.StatusTooManyRequests, "Too Many Requests", 0),
		"Unauthorized":      telegramtest.APIError(http.StatusUnauthorized, "Unauthorized", 0),
		"Transport":         {Hangup: true},
	}
	for name, reply := range retried {
		t.Run(name+"Retried", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.api.AnswerSend(reply)
			res, err := work(t, b, hi)
			require.Error(t, err)
			require.NotContains(t, err.Error(), testToken)
			require.Equal(t, river.EventKindJobFailed, res.EventKind)
			// Retried: River's first backoff is short enough that the job is
			// available again at once, rather than retryable.
			require.Contains(t, []rivertype.JobState{rivertype.JobStateAvailable, rivertype.JobStateRetryable}, res.Job.State)
			require.Len(t, res.Job.Errors, 1)
			require.Empty(t, b.api.Sent())
		})
	}

	t.Run("RateLimitedWaitsRetryAfter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.AnswerSend(telegramtest.APIError(http.StatusTooManyRequests, "Too Many Requests: retry after 30", 30))
		res, err := work(t, b, hi)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobSnoozed, res.EventKind)
		require.Equal(t, rivertype.JobStateScheduled, res.Job.State)
		wait := res.Job.ScheduledAt.Sub(*res.Job.AttemptedAt)
		require.GreaterOrEqual(t, wait, 30*time.Second, "snoozed for retry_after")
		require.Less(t, wait, time.Minute, "snoozed for retry_after, not River's backoff")
	})

	t.Run("RefusedCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.AnswerSend(telegramtest.APIError(http.StatusForbidden, "Forbidden: bot was blocked by the user "+testToken, 0))
		res, err := work(t, b, hi)
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCancelled, res.EventKind)
		require.Len(t, res.Job.Errors, 1)
		require.Contains(t, res.Job.Errors[0].Error, "bad_request (403): Forbidden: bot was blocked by the user [redacted]")
	})

	t.Run("BotOffCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := work(t, b, SendArgs{Bot: "other", ChatID: 42, Text: "hi"})
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCancelled, res.EventKind)
		require.Contains(t, res.Job.Errors[0].Error, `bot "other" is off on this worker`)
	})

	t.Run("InvalidArgsCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		res, err := work(t, b, SendArgs{Bot: "desk", ChatID: 42})
		require.NoError(t, err)
		require.Equal(t, river.EventKindJobCancelled, res.EventKind)
		require.Empty(t, b.api.Sent())
	})
}
