package telegram

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/ferryq/ferry/internal/testkit/telegramtest"
)

// testToken is the token of every test bot: the tests check it never leaks.
const testToken = "123456:SECRET-TOKEN-zz"

// newFakeAPI starts a fake Bot API for the test bot.
func newFakeAPI(t *testing.T) *telegramtest.BotAPI {
	t.Helper()
	return telegramtest.NewBotAPI(t, testToken)
}

// fakeClient is a client of the test bot on api.
func fakeClient(api *telegramtest.BotAPI) *Client { return NewClient(api.URL(), testToken, nil) }

// fakeLeader holds a fixed term; failing makes its fence fail.
type fakeLeader struct {
	term    int64
	failing atomic.Bool
}

var errFakeNotLeader = errors.New("election: not the leader")

func (l *fakeLeader) Term() int64 { return l.term }

func (l *fakeLeader) Fence(context.Context, pgx.Tx) error {
	if l.failing.Load() {
		return errFakeNotLeader
	}
	return nil
}
