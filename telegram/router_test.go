package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/pgtest"
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
	api    *fakeAPI
	route  outbox.Route
	router *Router
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
	return &routerBundle{api: api, router: r, route: r.Route("support", "support-bot", api.client())}
}

// deliver runs the route's handler on an update as the delivery worker
// would: inside a transaction (rolled back here).
func (b *routerBundle) deliver(t *testing.T, raw string) error {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtest.Pool(t).Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	return b.route.Handler(ctx, tx, outbox.Message{ID: 1, Topic: b.route.Topic, Payload: json.RawMessage(raw)})
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
			require.NoError(t, b.deliver(t, message(tc.text)))
			require.Equal(t, []sentMessage{{ChatID: -100123, Text: tc.reply}}, b.api.getSent())
		})
	}

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
			require.NoError(t, b.deliver(t, raw))
			require.Empty(t, b.api.getSent())
		})
	}

	t.Run("EditedMessage", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		require.NoError(t, b.deliver(t, `{"update_id":2,"edited_message":{"chat":{"id":5},"text":"/echo edited"}}`))
		require.Equal(t, []sentMessage{{ChatID: 5, Text: "edited"}}, b.api.getSent())
	})

	t.Run("TextHandler", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		b.router.HandleText(func(_ context.Context, _ pgx.Tx, _ Update, args []string) (string, error) {
			return fmt.Sprintf("%d words", len(args)), nil
		})
		require.NoError(t, b.deliver(t, message("hello there")))
		require.Equal(t, []sentMessage{{ChatID: -100123, Text: "2 words"}}, b.api.getSent())
	})

	t.Run("OwnHelp", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		b.router.Handle("help", func(context.Context, pgx.Tx, Update, []string) (string, error) { return "mine", nil })
		require.NoError(t, b.deliver(t, message("/help")))
		require.Equal(t, "mine", b.api.getSent()[0].Text)
	})

	t.Run("HandlerErrorScrubbed", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		err := b.deliver(t, message("/fail"))
		require.Error(t, err)
		require.NotContains(t, err.Error(), testToken)
		require.Contains(t, err.Error(), "bot"+redacted)

		err = b.deliver(t, message("/give_up"))
		var cancelErr *rivertype.JobCancelError
		require.ErrorAs(t, err, &cancelErr)
		require.NotContains(t, cancelErr.Unwrap().Error(), testToken)
		require.Empty(t, b.api.getSent())
	})

	t.Run("SendFailures", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		echo := "chat not found for bot" + testToken
		b.api.answerSend(apiError(500, echo, 0), apiError(403, "Forbidden: bot was blocked by the user "+testToken, 0))

		err := b.deliver(t, message("/start"))
		require.Error(t, err, "a server error is retried")
		require.Equal(t, KindServer, ErrorKind(err))
		var cancelErr *rivertype.JobCancelError
		require.False(t, errors.As(err, &cancelErr))
		require.NotContains(t, err.Error(), testToken)

		err = b.deliver(t, message("/start"))
		require.ErrorAs(t, err, &cancelErr, "a refusal is stuck at once")
		require.NotContains(t, cancelErr.Unwrap().Error(), testToken)
		require.NotContains(t, err.Error(), testToken)
	})

	t.Run("NotAnObjectCancelled", func(t *testing.T) {
		t.Parallel()
		b := routerSetup(t)
		var cancelErr *rivertype.JobCancelError
		require.ErrorAs(t, b.deliver(t, `"just a string"`), &cancelErr)
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
