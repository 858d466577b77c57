package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
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
	"github.com/ferryq/ferry/outbox"
)

func TestParseCommand(t *testing.T) {
	t.Parallel()
	cases := []struct {
		text    string
		command string
		bot     string
		args    []string
		ok      bool
	}{
		{"/start", "start", "", []string{}, true},
		{"/help arg1 arg2", "help", "", []string{"arg1", "arg2"}, true},
		{"/Echo@SomeBot  a\nb ", "echo", "SomeBot", []string{"a", "b"}, true},
		{"/cmd@SomeBot", "cmd", "SomeBot", []string{}, true},
		{"hello /start", "", "", nil, false},
		{"/", "", "", nil, false},
		{"/ start", "", "", nil, false},
		{"/weird-cmd", "", "", nil, false},
		{"", "", "", nil, false},
	}
	for _, tc := range cases {
		command, bot, args, ok := ParseCommand(tc.text)
		require.Equal(t, tc.ok, ok, tc.text)
		require.Equal(t, tc.command, command, tc.text)
		require.Equal(t, tc.bot, bot, tc.text)
		if tc.ok {
			require.Equal(t, tc.args, args, tc.text)
		}
	}
}

func TestParseUpdate(t *testing.T) {
	t.Parallel()

	u, err := ParseUpdate(json.RawMessage(update(9, "/start now")))
	require.NoError(t, err)
	require.Equal(t, Update{UpdateID: 9, ChatID: 42, FromID: 42, Username: "ann", Text: "/start now", Raw: json.RawMessage(update(9, "/start now"))}, u)

	// Lenient: a field of an unexpected type is left zero, the rest is read.
	u, err = ParseUpdate(json.RawMessage(`{"update_id":10,"edited_message":{"chat":{"id":"x"},"from":{"id":5,"username":7},"text":"/help"}}`))
	require.NoError(t, err)
	require.Equal(t, int64(10), u.UpdateID)
	require.Equal(t, int64(0), u.ChatID)
	require.Equal(t, int64(5), u.FromID)
	require.Empty(t, u.Username)
	require.Equal(t, "/help", u.Text)
	require.True(t, u.Edited)

	u, err = ParseUpdate(json.RawMessage(`{"update_id":11,"callback_query":{"id":"1"}}`))
	require.NoError(t, err)
	require.Equal(t, int64(11), u.UpdateID)
	require.Empty(t, u.Text)

	_, err = ParseUpdate(json.RawMessage(`[1,2]`))
	require.Error(t, err)
}

type routerBundle struct {
	api    *telegramtest.BotAPI
	route  outbox.Route
	router *Router
	// river is the client of the delivery's work context: the route's
	// handler queues replies with it.
	river  *river.Client[pgx.Tx]
	sender *SendWorker
}

func routerSetup(t *testing.T) *routerBundle {
	t.Helper()
	api := newFakeAPI(t)
	r := NewRouter()
	r.BotUsername = "SomeBot"
	r.Handle("/start", func(_ context.Context, _ pgx.Tx, u Update, _ []string) (string, error) {
		return "Welcome, " + u.Username, nil
	})
	r.Handle("echo", func(_ context.Context, _ pgx.Tx, _ Update, args []string) (string, error) {
		return strings.Join(args, " "), nil
	})
	r.Handle("note", func(ctx context.Context, tx pgx.Tx, u Update, args []string) (string, error) {
		// The handler's database work runs in the delivery's transaction.
		var n int
		if err := tx.QueryRow(ctx, "SELECT $1::int", len(args)).Scan(&n); err != nil {
			return "", err
		}
		return fmt.Sprintf("noted %d", n), nil
	})
	r.Handle("fail", func(context.Context, pgx.Tx, Update, []string) (string, error) {
		return "", errors.New("cannot reach https://api.telegram.org/bot" + testToken + "/x")
	})
	r.Handle("give_up", func(context.Context, pgx.Tx, Update, []string) (string, error) {
		return "", river.JobCancel(errors.New("token " + testToken + " refused"))
	})
	r.Fallback(func(_ context.Context, _ pgx.Tx, u Update, _ []string) (string, error) {
		cmd, _, _, _ := ParseCommand(u.Text)
		return "Unknown command /" + cmd, nil
	})
	client, err := river.NewClient(riverpgxv5.New(pgtest.Pool(t)), &river.Config{})
	require.NoError(t, err)
	return &routerBundle{
		api: api, router: r, route: r.Route("support", "support-bot", fakeClient(api)),
		river:  client,
		sender: NewSendWorker(map[string]*Client{"support": fakeClient(api)}, slog.New(slog.DiscardHandler)),
	}
}

// inTx runs fn in a transaction that is rolled back, with a River work
// context, as the delivery worker runs a route's handler.
func (b *routerBundle) inTx(t *testing.T, fn func(ctx context.Context, tx pgx.Tx)) {
	t.Helper()
	ctx := rivertest.WorkContext(t.Context(), b.river)
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	fn(ctx, tx)
}

func (b *routerBundle) handle(ctx context.Context, tx pgx.Tx, raw string) error {
	return b.route.Handler(ctx, tx, outbox.Message{ID: 1, Topic: b.route.Topic, Payload: json.RawMessage(raw)})
}

// deliver runs the route's handler on an update and returns its error and
// the replies it queued in the delivery's transaction. It checks that
// nothing reached the Bot API while the transaction was open.
func (b *routerBundle) deliver(t *testing.T, raw string) (queued []SendArgs, err error) {
	t.Helper()
	b.inTx(t, func(ctx context.Context, tx pgx.Tx) {
		err = b.handle(ctx, tx, raw)
		queued = queuedReplies(t, tx)
		require.Empty(t, b.api.Sent(), "nothing is sent inside the delivery's transaction")
	})
	return queued, err
}

// reply delivers an update, then works the replies it queued as
// SendWorker would after the commit, and returns what the Bot API got.
func (b *routerBundle) reply(t *testing.T, raw string) []telegramtest.Message {
	t.Helper()
	queued, err := b.deliver(t, raw)
	require.NoError(t, err)
	for _, args := range queued {
		require.NoError(t, b.sender.Work(t.Context(), &river.Job[SendArgs]{JobRow: &rivertype.JobRow{}, Args: args}))
	}
	return b.api.Sent()
}

// queuedReplies returns the telegram.send jobs tx sees, oldest first.
func queuedReplies(t *testing.T, tx pgx.Tx) []SendArgs {
	t.Helper()
	rows, err := tx.Query(t.Context(), "SELECT args FROM river_job WHERE kind = $1 ORDER BY id", SendArgs{}.Kind())
	require.NoError(t, err)
	queued, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SendArgs, error) {
		var a SendArgs
		err := row.Scan(&a)
		return a, err
	})
	require.NoError(t, err)
	return queued
}

func message(text string) string {
	return fmt.Sprintf(`{"update_id":1,"message":{"chat":{"id":-100123},"from":{"id":7,"username":"ann"},"text":%q}}`, text)
}

func TestRouter_Route(t *testing.T) {
	t.Parallel()

	t.Run("Route", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		require.Equal(t, "telegram.support", b.route.Topic)
		require.Equal(t, "support-bot", b.route.Name)
		_, err := outbox.NewRoutes(b.route)
		require.NoError(t, err)
	})

	replies := []struct {
		name, text, reply string
	}{
		{"Start", "/start", "Welcome, ann"},
		{"EchoArgs", "/echo a b", "a b"},
		{"AddressedToThisBot", "/echo@somebot x y", "x y"},
		{"DefaultHelp", "/help", "Commands:\n/echo\n/fail\n/give_up\n/note\n/start"},
		{"InTransaction", "/note 1 2 3", "noted 3"},
		{"UnknownToFallback", "/nope 1", "Unknown command /nope"},
	}
	for _, tc := range replies {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := routerSetup(t)
			require.Equal(t, []telegramtest.Message{{ChatID: -100123, Text: tc.reply}}, b.reply(t, message(tc.text)))
		})
	}

	t.Run("ReplyQueuedInTransaction", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		queued, err := b.deliver(t, message("/start"))
		require.NoError(t, err)
		require.Equal(t, []SendArgs{{Bot: "support", ChatID: -100123, Text: "Welcome, ann", UpdateID: 1}}, queued)
		// deliver rolled its transaction back: the reply went with it.
		b.inTx(t, func(_ context.Context, tx pgx.Tx) { require.Empty(t, queuedReplies(t, tx)) })
	})

	t.Run("ReplyQueuedOncePerUpdate", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		b.inTx(t, func(ctx context.Context, tx pgx.Tx) {
			require.NoError(t, b.handle(ctx, tx, message("/echo first")))
			require.NoError(t, b.handle(ctx, tx, message("/echo again")))
			require.Equal(t, []SendArgs{{Bot: "support", ChatID: -100123, Text: "first", UpdateID: 1}}, queuedReplies(t, tx))
		})
	})

	t.Run("OutsideAWorker", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		tx, err := pgtest.Pool(t).Begin(t.Context())
		require.NoError(t, err)
		defer func() { _ = tx.Rollback(t.Context()) }()
		err = b.handle(t.Context(), tx, message("/start"))
		require.ErrorContains(t, err, "a Router's route runs in an outbox.deliver job")
	})

	for name, raw := range map[string]string{
		"PlainTextIgnored":       message("hello there"),
		"OtherBotIgnored":        message("/echo@OtherBot x"),
		"NoMessageIgnored":       `{"update_id":3,"callback_query":{"id":"1"}}`,
		"UnknownWithoutFallback": message("/nope"),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := routerSetup(t)
			if name == "UnknownWithoutFallback" {
				b.router.fallback = nil
			}
			queued, err := b.deliver(t, raw)
			require.NoError(t, err)
			require.Empty(t, queued)
		})
	}

	t.Run("EditedMessage", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		require.Equal(t, []telegramtest.Message{{ChatID: 5, Text: "edited"}}, b.reply(t, `{"update_id":2,"edited_message":{"chat":{"id":5},"text":"/echo edited"}}`))
	})

	t.Run("TextHandler", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		b.router.HandleText(func(_ context.Context, _ pgx.Tx, _ Update, args []string) (string, error) {
			return fmt.Sprintf("%d words", len(args)), nil
		})
		require.Equal(t, []telegramtest.Message{{ChatID: -100123, Text: "2 words"}}, b.reply(t, message("hello there")))
	})

	t.Run("OwnHelp", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		b.router.Handle("help", func(context.Context, pgx.Tx, Update, []string) (string, error) { return "mine", nil })
		require.Equal(t, "mine", b.reply(t, message("/help"))[0].Text)
	})

	t.Run("HandlerErrorScrubbed", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		queued, err := b.deliver(t, message("/fail"))
		require.Error(t, err)
		require.NotContains(t, err.Error(), testToken)
		require.Contains(t, err.Error(), "bot[redacted]")
		require.Empty(t, queued)

		queued, err = b.deliver(t, message("/give_up"))
		var cancelErr *rivertype.JobCancelError
		require.ErrorAs(t, err, &cancelErr)
		require.NotContains(t, cancelErr.Unwrap().Error(), testToken)
		require.Empty(t, queued)
	})

	t.Run("NotAnObjectCancelled", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		_, err := b.deliver(t, `"just a string"`)
		var cancelErr *rivertype.JobCancelError
		require.ErrorAs(t, err, &cancelErr)
	})
}

func TestRouter_Handle(t *testing.T) {
	t.Parallel()
	r := NewRouter()
	fn := func(context.Context, pgx.Tx, Update, []string) (string, error) { return "", nil }
	r.Handle("ok_1", fn)
	require.Panics(t, func() { r.Handle("/ok_1", fn) }, "duplicate")
	require.Panics(t, func() { r.Handle("bad-name", fn) })
	require.Panics(t, func() { r.Handle("", fn) })
	require.Panics(t, func() { r.Handle("x", nil) })
	require.Panics(t, func() { r.Route("b", "r", nil) })
	require.Equal(t, []string{"/ok_1"}, r.Commands())

	var zero Router // the zero value works too
	zero.Handle("start", fn)
	require.Equal(t, []string{"/start"}, zero.Commands())
}

// TestRouter_RouteThroughRiver: an update delivered by a River worker to a
// Router's route is answered by a telegram.send job, worked once its
// transaction has committed.
func TestRouter_RouteThroughRiver(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	api := newFakeAPI(t)
	quiet := slog.New(slog.DiscardHandler)

	r := NewRouter()
	r.Handle("echo", func(_ context.Context, _ pgx.Tx, _ Update, args []string) (string, error) {
		return strings.Join(args, " "), nil
	})
	routes, err := outbox.NewRoutes(r.Route("support", "support-bot", fakeClient(api)))
	require.NoError(t, err)
	workers := river.NewWorkers()
	river.AddWorker(workers, outbox.NewDeliverWorker(outbox.DeliverConfig{Pool: pool, Routes: routes, Logger: quiet}))
	river.AddWorker(workers, NewSendWorker(map[string]*Client{"support": fakeClient(api)}, quiet))
	queues := map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: 2}}
	for _, q := range routes.Queues() { // each route's deliveries have a queue of their own
		queues[q] = river.QueueConfig{MaxWorkers: 2}
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            quiet,
		Queues:            queues,
		TestOnly:          true,
		Workers:           workers,
	})
	require.NoError(t, err)
	events, cancel := client.Subscribe(river.EventKindJobCompleted)
	t.Cleanup(cancel)
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(stopCtx))
	})

	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := outbox.Add(ctx, tx, Topic("support"), json.RawMessage(message("/echo hello there")), outbox.WithDedupKey("1"))
		return err
	}))
	_, err = outbox.NewRelay(outbox.RelayConfig{Pool: pool, Inserter: client, Routes: routes, Logger: quiet}).RelayOnce(ctx)
	require.NoError(t, err)

	var kinds []string
	for len(kinds) < 2 {
		select {
		case ev := <-events:
			kinds = append(kinds, ev.Job.Kind)
		case <-time.After(30 * time.Second):
			t.Fatalf("jobs completed so far: %v; want outbox.deliver and telegram.send", kinds)
		}
	}
	require.ElementsMatch(t, []string{"outbox.deliver", "telegram.send"}, kinds)
	require.Equal(t, []telegramtest.Message{{ChatID: -100123, Text: "hello there"}}, api.Sent())
}
