package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/testkit/telegramtest"
)

func TestClient_GetUpdates(t *testing.T) {
	t.Parallel()

	t.Run("RawUpdatesAndRequest", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		odd := `{"update_id":8,"message":{"text":{"unexpected":"object"}, "date":"soon"}}`
		api.Push(update(7, "hi"), odd)
		got, err := fakeClient(api).GetUpdates(context.Background(), 7, 3*time.Second, []string{"message", "edited_message"})
		require.NoError(t, err)
		require.Len(t, got, 2)
		require.Equal(t, update(7, "hi"), string(got[0]), "each update's JSON as sent")
		require.Equal(t, odd, string(got[1]))
		c := api.Calls()[0]
		require.Equal(t, telegramtest.Call{Offset: 7, Timeout: 3, Allowed: []string{"message", "edited_message"}, At: c.At}, c)
	})

	t.Run("HoldsUntilUpdateArrives", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		go func() {
			time.Sleep(100 * time.Millisecond)
			api.Push(update(1, "late"))
		}()
		start := time.Now()
		got, err := fakeClient(api).GetUpdates(context.Background(), 0, 5*time.Second, nil)
		require.NoError(t, err)
		require.Len(t, got, 1)
		require.GreaterOrEqual(t, time.Since(start), 100*time.Millisecond)
		require.Nil(t, api.Calls()[0].Allowed, "nil allowed updates are not sent")
	})

	t.Run("CancelEndsLongPoll", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := fakeClient(api).GetUpdates(ctx, 0, time.Hour, nil)
			done <- err
		}()
		require.Eventually(t, func() bool { n, _ := api.Inflight(); return n == 1 }, time.Minute, 5*time.Millisecond)

		cancel()
		var err error
		select {
		case err = <-done:
		case <-time.After(time.Minute):
			t.Fatal("GetUpdates did not return within a minute of its context's end (a watchdog, not a measurement)")
		}
		require.ErrorIs(t, err, context.Canceled, "the hour-long poll ended with its context")
		require.Equal(t, "canceled", ErrorKind(err))
		require.Eventually(t, func() bool { return api.Calls()[0].Abandoned }, time.Minute, 5*time.Millisecond,
			"the server saw the client go away")
	})
}

func TestClient_Errors(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name       string
		reply      telegramtest.Reply
		kind       string
		retryAfter time.Duration
		contains   string
	}{
		{"Unauthorized", telegramtest.APIError(401, "Unauthorized", 0), KindUnauthorized, 0, "telegram: getUpdates: unauthorized (401): Unauthorized"},
		{"Conflict", telegramtest.APIError(409, "Conflict: can't use getUpdates method while webhook is active", 0), KindConflict, 0, "webhook is active"},
		{"RateLimited", telegramtest.APIError(429, "Too Many Requests: retry after 3", 3), KindRateLimited, 3 * time.Second, "retry after 3s"},
		{"RetryAfterHeader", telegramtest.Reply{Status: 429, Body: `{"ok":false,"error_code":429,"description":"slow down"}`, Header: map[string]string{"Retry-After": "2"}}, KindRateLimited, 2 * time.Second, "slow down"},
		{"Server", telegramtest.APIError(502, "Bad Gateway", 0), KindServer, 0, "server (502)"},
		{"NotJSON", telegramtest.Reply{Status: 503, Body: "<html>maintenance</html>"}, KindServer, 0, "answer is not Bot API JSON: <html>maintenance</html>"},
		{"OKButNotOK", telegramtest.Reply{Status: 200, Body: `{"ok":false}`}, KindServer, 0, "answer not ok"},
		{"BadRequest", telegramtest.APIError(400, "Bad Request: chat not found", 0), KindBadRequest, 0, "bad_request (400)"},
		{"Forbidden", telegramtest.APIError(403, "Forbidden: bot was blocked by the user", 0), KindBadRequest, 0, "blocked"},
		{"Transport", telegramtest.Reply{Hangup: true}, KindTransport, 0, "telegram: getUpdates: "},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			api := newFakeAPI(t)
			api.Answer(tc.reply)
			_, err := fakeClient(api).GetUpdates(context.Background(), 0, 0, nil)
			require.Error(t, err)
			require.Equal(t, tc.kind, ErrorKind(err))
			require.Contains(t, err.Error(), tc.contains)
			var apiErr *APIError
			if errors.As(err, &apiErr) {
				require.Equal(t, "getUpdates", apiErr.Method)
				require.Equal(t, tc.reply.Status, apiErr.StatusCode)
				require.Equal(t, tc.kind, apiErr.Kind())
				require.Equal(t, tc.retryAfter, apiErr.RetryAfter)
			} else {
				var trErr *TransportError
				require.ErrorAs(t, err, &trErr)
				require.Equal(t, KindTransport, trErr.Kind())
			}
		})
	}

	t.Run("WrongToken", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		err := NewClient(api.URL(), "999:OTHER", nil).SendMessage(context.Background(), 1, "x")
		require.Equal(t, KindBadRequest, ErrorKind(err))
		require.NotContains(t, err.Error(), "OTHER")
	})

	t.Run("RedirectNotFollowed", func(t *testing.T) {
		t.Parallel()
		api := newFakeAPI(t)
		api.Answer(telegramtest.Reply{Status: http.StatusFound, Header: map[string]string{"Location": "http://elsewhere.invalid/bot" + testToken + "/getUpdates"}})
		_, err := fakeClient(api).GetUpdates(context.Background(), 0, 0, nil)
		require.Equal(t, KindServer, ErrorKind(err))
		require.NotContains(t, err.Error(), testToken)
	})
}

func TestClient_Redact(t *testing.T) {
	t.Parallel()
	c := NewClient("https://user:pw@proxy.example/?k=v", testToken, nil)
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v %#v %s", c, c, c, c)} {
		require.NotContains(t, s, testToken)
		require.NotContains(t, s, "pw")
	}
	escaped := strings.ReplaceAll(testToken, ":", "%3A")
	require.Equal(t, "x bot[redacted] [redacted] [redacted] y", c.redact("x bot"+testToken+" "+testToken+" "+escaped+" y"))

	// An empty token scrubs nothing (and does not loop on empty matches).
	require.Equal(t, "abc", NewClient("", "", nil).redact("abc"))
	require.NoError(t, NewClient("", "", nil).redactErr(nil))
}

func TestClient_SendMessage(t *testing.T) {
	t.Parallel()
	api := newFakeAPI(t)
	require.NoError(t, fakeClient(api).SendMessage(context.Background(), -100123, "héllo\nworld"))
	require.Equal(t, []telegramtest.Message{{ChatID: -100123, Text: "héllo\nworld"}}, api.Sent())
}
