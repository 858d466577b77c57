package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/election"
	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/telegramtest"
)

// The elector is the poller's Leader.
var _ Leader = (*election.Elector)(nil)

// Short waits for tests: the backoffs are asserted as lower bounds.
const (
	testErrorBackoff = 100 * time.Millisecond
	testAuthBackoff  = 300 * time.Millisecond
)

type testBundle struct {
	pool   *pgxpool.Pool
	api    *telegramtest.BotAPI
	leader *fakeLeader
	logs   *logtest.Recorder
	reg    *prometheus.Registry
	bot    string
}

var botSeq atomic.Int64

// setup gives each test a bot of its own in the package's database (rows
// are keyed by bot, topics are telegram.<bot>) and a fake Bot API.
func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{
		pool:   pgtest.Pool(t),
		api:    newFakeAPI(t),
		leader: &fakeLeader{term: 7},
		logs:   &logtest.Recorder{},
		reg:    prometheus.NewRegistry(),
		bot:    fmt.Sprintf("bot_%d", botSeq.Add(1)),
	}
}

// poller returns a poller of the bundle's bot on the fake API; mod adjusts
// its config.
func (b *testBundle) poller(t *testing.T, mod func(*PollerConfig)) *Poller {
	t.Helper()
	cfg := PollerConfig{
		Bot: b.bot, Client: fakeClient(b.api), Pool: b.pool, Leader: b.leader,
		PollTimeout: time.Second, ErrorBackoff: testErrorBackoff, AuthBackoff: testAuthBackoff,
		Logger: b.logs.Logger(),
	}
	if mod != nil {
		mod(&cfg)
	}
	p, err := NewPoller(cfg)
	require.NoError(t, err)
	return p
}

// run starts p.Run; the returned stop cancels it and returns Run's error
// (stop is also called at cleanup).
func run(t *testing.T, p *Poller) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var (
		stopped atomic.Bool
		result  error
	)
	stop = func() error {
		if stopped.CompareAndSwap(false, true) {
			cancel()
			select {
			case result = <-done:
			case <-time.After(time.Minute):
				t.Errorf("Run did not return within a minute of its context's end (a watchdog, not a measurement)")
			}
		}
		return result
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

type outboxRow struct {
	Topic    string
	DedupKey string
	Payload  string
}

func (b *testBundle) outbox(t *testing.T) []outboxRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT topic, dedup_key, payload::text FROM ferry_outbox WHERE topic = $1 ORDER BY id", Topic(b.bot))
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[outboxRow])
	require.NoError(t, err)
	return out
}

type offsetRow struct {
	NextOffset    int64
	LastUpdateID  *int64
	UpdatesStored int64
	Term          *int64
}

// offset returns the bot's ferry_telegram_offset row, nil when none.
func (b *testBundle) offset(t *testing.T) *offsetRow {
	t.Helper()
	var o offsetRow
	err := b.pool.QueryRow(context.Background(),
		"SELECT next_offset, last_update_id, updates_stored, term FROM ferry_telegram_offset WHERE bot = $1", b.bot).
		Scan(&o.NextOffset, &o.LastUpdateID, &o.UpdatesStored, &o.Term)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil
	}
	require.NoError(t, err)
	return &o
}

type malformedRow struct {
	UpdateID *int64
	Raw      string
	Error    string
}

func (b *testBundle) malformed(t *testing.T) []malformedRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT update_id, raw, error FROM ferry_telegram_malformed WHERE bot = $1 ORDER BY id", b.bot)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[malformedRow])
	require.NoError(t, err)
	return out
}

// waitCalls waits until the fake has received at least n getUpdates.
func (b *testBundle) waitCalls(t *testing.T, n int, within time.Duration) []telegramtest.Call {
	t.Helper()
	require.Eventually(t, func() bool { return len(b.api.Calls()) >= n }, within, 5*time.Millisecond,
		"want %d getUpdates calls", n)
	return b.api.Calls()
}

// waitOffsetCall waits for a getUpdates sent with offset.
func (b *testBundle) waitOffsetCall(t *testing.T, offset int64) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, c := range b.api.Calls() {
			if c.Offset == offset {
				return true
			}
		}
		return false
	}, 5*time.Second, 5*time.Millisecond, "want a getUpdates with offset %d", offset)
}

func update(id int64, text string) string {
	return fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"date":1700000000,"chat":{"id":42,"type":"private"},"from":{"id":42,"is_bot":false,"first_name":"Ann","username":"ann"},"text":%q}}`, id, id, text)
}

func TestPoller_Run(t *testing.T) {
	t.Parallel()

	t.Run("StoresBatchAndResumesFromStoredOffset", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.Push(update(100, "a"), update(101, "b"), update(102, "c"))
		p := b.poller(t, func(c *PollerConfig) { c.AllowedUpdates = []string{"message"}; c.Registerer = b.reg })
		stop := run(t, p)

		b.waitOffsetCall(t, 103) // the batch is acknowledged only after it is stored
		rows := b.outbox(t)
		require.Len(t, rows, 3)
		for i, r := range rows {
			id := int64(100 + i)
			require.Equal(t, "telegram."+b.bot, r.Topic)
			require.Equal(t, fmt.Sprint(id), r.DedupKey)
			require.JSONEq(t, update(id, string(rune('a'+i))), r.Payload)
		}
		o := b.offset(t)
		require.NotNil(t, o)
		require.Equal(t, int64(103), o.NextOffset)
		require.Equal(t, int64(102), *o.LastUpdateID)
		require.Equal(t, int64(3), o.UpdatesStored)
		require.Equal(t, int64(7), *o.Term)

		calls := b.api.Calls()
		require.Equal(t, int64(0), calls[0].Offset)
		require.Equal(t, int64(1), calls[0].Timeout)
		require.Equal(t, []string{"message"}, calls[0].Allowed)

		st := p.Status()
		require.Equal(t, StatePolling, st.State)
		require.Equal(t, int64(7), st.Term)
		require.Equal(t, int64(102), st.LastUpdateID)
		require.Equal(t, int64(3), st.UpdatesStored)
		require.Equal(t, int64(103), st.NextOffset)
		require.False(t, st.LastPollAt.IsZero())
		require.Empty(t, st.LastErrorKind)
		require.Equal(t, 1.0, gaugeValue(t, b.reg, metricPolling, b.bot, ""))
		require.Equal(t, 3.0, gaugeValue(t, b.reg, metricStored, b.bot, ""))
		require.Equal(t, 102.0, gaugeValue(t, b.reg, metricLastUpdateID, b.bot, ""))

		require.NoError(t, stop())
		require.Equal(t, StateStandby, p.Status().State)
		require.Equal(t, 0.0, gaugeValue(t, b.reg, metricPolling, b.bot, ""))

		// A new poller on the same database (a restart, a failover)
		// resumes from the stored offset: nothing stored twice, nothing
		// lost.
		n := len(b.api.Calls())
		p2 := b.poller(t, nil)
		run(t, p2)
		calls = b.waitCalls(t, n+1, 5*time.Second)
		require.Equal(t, int64(103), calls[n].Offset)
		b.api.Push(update(103, "d"))
		b.waitOffsetCall(t, 104)
		rows = b.outbox(t)
		require.Len(t, rows, 4)
		require.Equal(t, "103", rows[3].DedupKey)
		require.Equal(t, int64(4), b.offset(t).UpdatesStored)
		require.Equal(t, int64(4), p2.Status().UpdatesStored)

		_, most := b.api.Inflight()
		require.Equal(t, 1, most, "never two getUpdates at once")
	})

	t.Run("RedeliveredBatchStoredOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.Push(update(1, "a"), update(2, "b"), update(3, "c"))
		p := b.poller(t, nil)
		run(t, p)
		b.waitOffsetCall(t, 4)

		// The server ignores the offset once: 1, 2, 3 come again with 4.
		b.api.Redeliver(update(4, "d"))
		b.waitOffsetCall(t, 5)
		rows := b.outbox(t)
		require.Len(t, rows, 4)
		for i, r := range rows {
			require.Equal(t, fmt.Sprint(i+1), r.DedupKey)
		}
		o := b.offset(t)
		require.Equal(t, int64(5), o.NextOffset)
		require.Equal(t, int64(4), o.UpdatesStored, "redeliveries are not counted as stored")
	})

	t.Run("ReusedUpdateIDWithOtherContentIsNotLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.Push(update(1, "a"))
		run(t, b.poller(t, nil))
		b.waitOffsetCall(t, 2)

		// Telegram restarts ids at random after a week of silence: the
		// same id, another update.
		b.api.Redeliver(update(1, "a"), update(1, "other"))
		require.Eventually(t, func() bool { return len(b.outbox(t)) == 2 }, 5*time.Second, 10*time.Millisecond)
		rows := b.outbox(t)
		require.Equal(t, "1", rows[0].DedupKey)
		require.True(t, strings.HasPrefix(rows[1].DedupKey, "1:"), rows[1].DedupKey)
		require.JSONEq(t, update(1, "other"), rows[1].Payload)
		require.Contains(t, b.logs.String(), "telegram: update_id reused by Telegram")
	})

	t.Run("MalformedUpdatesKeptAndTheRestStored", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		big := fmt.Sprintf(`{"update_id":12,"message":{"text":"%s"}}`, strings.Repeat("x", 300<<10))
		b.api.Push(
			`{"update_id":10,"message":{"text":5,"chat":"not an object","from":[1,2]}}`, // odd types: stored as is
			`{"message":{"text":"no id"}}`,
			`{"update_id":"11","message":{}}`,
			big,
			`{"update_id":13,"message":{"text":"nul \u0000 byte"}}`, // jsonb refuses \u0000
			update(14, "after"),
		)
		p := b.poller(t, func(c *PollerConfig) { c.Registerer = b.reg })
		run(t, p)
		b.waitOffsetCall(t, 15)

		rows := b.outbox(t)
		require.Len(t, rows, 2)
		require.Equal(t, "10", rows[0].DedupKey)
		require.JSONEq(t, `{"update_id":10,"message":{"text":5,"chat":"not an object","from":[1,2]}}`, rows[0].Payload)
		require.Equal(t, "14", rows[1].DedupKey)

		bad := b.malformed(t)
		require.Len(t, bad, 4)
		require.Nil(t, bad[0].UpdateID)
		require.Equal(t, "no update_id", bad[0].Error)
		require.Equal(t, `{"message":{"text":"no id"}}`, bad[0].Raw)
		require.Nil(t, bad[1].UpdateID)
		require.Contains(t, bad[1].Error, "update_id is a JSON string")
		require.Equal(t, int64(12), *bad[2].UpdateID)
		require.Contains(t, bad[2].Error, "over the outbox limit")
		require.Len(t, bad[2].Raw, MaxMalformedRawBytes)
		require.Equal(t, int64(13), *bad[3].UpdateID)
		require.Contains(t, bad[3].Error, "database refused the payload")

		o := b.offset(t)
		require.Equal(t, int64(15), o.NextOffset)
		require.Equal(t, int64(2), o.UpdatesStored)
		st := p.Status()
		require.Equal(t, KindMalformed, st.LastErrorKind)
		require.Equal(t, 4.0, gaugeValue(t, b.reg, metricErrors, b.bot, KindMalformed))
		require.Contains(t, b.logs.String(), "telegram: malformed update kept in ferry_telegram_malformed")
	})

	t.Run("BatchWithoutIDsKeptOnceAndNoSpin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.Push(`{"message":{"text":"one"}}`, `{"message":{"text":"two"}}`)
		run(t, b.poller(t, nil))

		calls := b.waitCalls(t, 4, 5*time.Second)
		for i := 1; i < 4; i++ {
			require.GreaterOrEqual(t, calls[i].At.Sub(calls[i-1].At), testErrorBackoff, "call %d came too soon", i)
			require.Equal(t, int64(0), calls[i].Offset)
		}
		require.Len(t, b.malformed(t), 2, "kept once however often they come")
		require.Nil(t, b.offset(t))
		require.Contains(t, b.logs.String(), "telegram: batch without any update_id; offset not advanced")
	})

	t.Run("FailingFenceStoresNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.leader.failing.Store(true)
		b.api.Push(update(1, "a"), update(2, "b"))
		p := b.poller(t, nil)

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := p.Run(ctx)
		require.ErrorIs(t, err, errFakeNotLeader)
		require.Contains(t, err.Error(), "telegram: bot "+b.bot+": store 2 update(s)")
		require.Empty(t, b.outbox(t))
		require.Nil(t, b.offset(t))
		require.Equal(t, KindFence, p.Status().LastErrorKind)
		require.Equal(t, StateStandby, p.Status().State)
		for _, c := range b.api.Calls() {
			require.Equal(t, int64(0), c.Offset, "the batch was never acknowledged")
		}

		// Leading again, the same poller stores the batch from offset 0.
		b.leader.failing.Store(false)
		run(t, p)
		b.waitOffsetCall(t, 3)
		require.Len(t, b.outbox(t), 2)
	})

	t.Run("FenceFailingAfterCancelReturnsNil", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.leader.failing.Store(true)
		p := b.poller(t, nil)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.NoError(t, p.Run(ctx))
	})

	t.Run("CancelEndsInFlightLongPoll", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.poller(t, func(c *PollerConfig) { c.PollTimeout = 50 * time.Second })
		stop := run(t, p)
		require.Eventually(t, func() bool { n, _ := b.api.Inflight(); return n == 1 }, 5*time.Second, 5*time.Millisecond)
		time.Sleep(20 * time.Millisecond) // well into the long poll

		require.NoError(t, stop())
		require.Len(t, b.api.Calls(), 1)
		// Cancelled, the call is abandoned by the client; waited out, it
		// would be answered at its timeout (50s) and not be.
		require.Eventually(t, func() bool { return b.api.Calls()[0].Abandoned }, time.Minute, 5*time.Millisecond,
			"the server saw the client go away")
		require.Eventually(t, func() bool { n, _ := b.api.Inflight(); return n == 0 }, time.Minute, 5*time.Millisecond,
			"the server saw the request end")
	})

	t.Run("OneRunAtATime", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.poller(t, nil)
		run(t, p)
		b.waitCalls(t, 1, 5*time.Second)
		err := p.Run(context.Background())
		require.ErrorContains(t, err, "already running")
	})
}

func TestPoller_Errors(t *testing.T) {
	t.Parallel()

	// gapAfter returns the time between the call answered with the
	// scripted error (call i) and the next one.
	gapAfter := func(calls []telegramtest.Call, i int) time.Duration { return calls[i+1].At.Sub(calls[i].At) }

	cases := []struct {
		name    string
		reply   telegramtest.Reply
		kind    string
		minWait time.Duration
		log     string
	}{
		{"ServerError", telegramtest.APIError(500, "Internal Server Error", 0), KindServer, testErrorBackoff, "telegram: getUpdates failed"},
		{"NotJSON", telegramtest.Reply{Status: 502, Body: "<html>Bad Gateway</html>"}, KindServer, testErrorBackoff, "telegram: getUpdates failed"},
		{"Transport", telegramtest.Reply{Hangup: true}, KindTransport, testErrorBackoff, "telegram: getUpdates failed"},
		{"BadToken", telegramtest.APIError(401, "Unauthorized", 0), KindUnauthorized, testAuthBackoff, "telegram: bad token (401); polling paused"},
		{"Conflict", telegramtest.APIError(409, "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running", 0),
			KindConflict, testAuthBackoff, "telegram: conflict (409): another getUpdates consumer or a webhook is set for this bot"},
		{"RateLimited", telegramtest.APIError(429, "Too Many Requests: retry after 1", 1), KindRateLimited, time.Second, "telegram: getUpdates failed"},
		{"BadRequest", telegramtest.APIError(400, "Bad Request: wrong offset", 0), KindBadRequest, testErrorBackoff, "telegram: getUpdates failed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.api.Answer(tc.reply)
			b.api.Push(update(5, "after the error"))
			p := b.poller(t, func(c *PollerConfig) { c.Registerer = b.reg })
			run(t, p)

			b.waitOffsetCall(t, 6)
			calls := b.api.Calls()
			require.GreaterOrEqual(t, gapAfter(calls, 0), tc.minWait)
			require.Equal(t, int64(0), calls[1].Offset)
			require.Len(t, b.outbox(t), 1)

			logs := b.logs.String()
			require.Contains(t, logs, tc.log)
			require.Contains(t, logs, `"kind":"`+tc.kind+`"`)
			st := p.Status()
			require.Equal(t, tc.kind, st.LastErrorKind)
			require.NotEmpty(t, st.LastError)
			require.False(t, st.LastErrorAt.IsZero())
			require.Equal(t, StatePolling, st.State)
			require.Equal(t, 1.0, gaugeValue(t, b.reg, metricErrors, b.bot, tc.kind))
		})
	}

	t.Run("BackingOffState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.api.Answer(telegramtest.APIError(401, "Unauthorized", 0))
		p := b.poller(t, func(c *PollerConfig) { c.AuthBackoff = time.Hour })
		stop := run(t, p)
		require.Eventually(t, func() bool { return p.Status().State == StateBackingOff }, 5*time.Second, 5*time.Millisecond)
		require.NoError(t, stop(), "a backoff of an hour ends with the context")
		require.Len(t, b.api.Calls(), 1, "the backoff was not waited out")
	})
}

// TestPoller_TokenNeverLeaks runs through every error path with a token in
// the URL, in descriptions the server echoes and in bodies that are not
// JSON, and checks the token appears in no log line, no error string, no
// status and no metric.
func TestPoller_TokenNeverLeaks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	echo := "request to /bot" + testToken + "/getUpdates failed (token " + testToken + ")"
	replies := []telegramtest.Reply{
		telegramtest.APIError(500, echo, 0),
		telegramtest.APIError(400, echo, 0),
		telegramtest.APIError(401, echo, 0),
		telegramtest.APIError(409, echo, 0),
		telegramtest.APIError(429, echo, 1),
		{Status: 502, Body: "<html>upstream https://api.telegram.org/bot" + testToken + "/getUpdates</html>"},
		{Status: 200, Body: `{"ok":false,"description":"` + echo + `"}`},
		{Hangup: true},
	}
	b.api.Answer(replies...)
	b.api.Push(update(1, "a"), `{"message":{"text":"`+testToken+`"}}`)
	p := b.poller(t, func(c *PollerConfig) { c.Registerer = b.reg; c.AuthBackoff = testErrorBackoff })
	stop := run(t, p)
	b.waitOffsetCall(t, 2)
	statuses := []BotStatus{p.Status()}
	require.NoError(t, stop())

	// A closed port: the transport error's *url.Error quotes the URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closedURL := "http://" + ln.Addr().String()
	require.NoError(t, ln.Close())
	dead := b.poller(t, func(c *PollerConfig) {
		c.Client = NewClient(closedURL, testToken, nil)
		c.Bot = b.bot + "_dead"
	})
	stopDead := run(t, dead)
	require.Eventually(t, func() bool { return dead.Status().LastErrorKind == KindTransport }, 5*time.Second, 5*time.Millisecond)
	statuses = append(statuses, dead.Status())
	require.NoError(t, stopDead())

	// Errors of the client itself, for each reply.
	var errs []error
	c := fakeClient(b.api)
	b.api.Answer(replies...)
	for range replies {
		_, err := c.GetUpdates(context.Background(), 0, 0, nil)
		require.Error(t, err)
		errs = append(errs, err)
	}
	_, err = NewClient(closedURL, testToken, nil).GetUpdates(context.Background(), 0, 0, nil)
	require.ErrorContains(t, err, "connect")
	errs = append(errs, err)
	b.api.AnswerSend(telegramtest.APIError(400, echo, 0))
	errs = append(errs, c.SendMessage(context.Background(), 1, "hi"))
	_, err = NewClient("http://bad host\x7f/", testToken, nil).GetUpdates(context.Background(), 0, 0, nil)
	errs = append(errs, err)

	var texts []string
	texts = append(texts, b.logs.String())
	for _, err := range errs {
		require.Error(t, err)
		texts = append(texts, err.Error(), fmt.Sprintf("%v %+v %#v", err, err, err))
		for e := errors.Unwrap(err); e != nil; e = errors.Unwrap(e) {
			texts = append(texts, e.Error())
		}
	}
	for _, st := range statuses {
		js, err := json.Marshal(st)
		require.NoError(t, err)
		texts = append(texts, string(js), fmt.Sprintf("%+v", st))
	}
	mfs, err := b.reg.Gather()
	require.NoError(t, err)
	texts = append(texts, fmt.Sprint(mfs))
	texts = append(texts, fmt.Sprintf("%v %+v %#v", c, c, c))

	require.Contains(t, b.logs.String(), "telegram: bad token (401)")
	require.Contains(t, b.logs.String(), "telegram: conflict (409)")
	require.Contains(t, b.logs.String(), "[redacted]", "the echoed token was there, scrubbed")
	for _, s := range texts {
		require.NotContains(t, s, testToken)
		require.NotContains(t, s, "SECRET-TOKEN")
	}
}

func TestNewPoller_Validate(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	valid := PollerConfig{Bot: "support", Client: NewClient("", testToken, nil), Pool: pool, Leader: &fakeLeader{}}
	_, err := NewPoller(valid)
	require.NoError(t, err)

	for name, mod := range map[string]func(*PollerConfig){
		"BadName":        func(c *PollerConfig) { c.Bot = "Support Bot" },
		"NoClient":       func(c *PollerConfig) { c.Client = nil },
		"NoPool":         func(c *PollerConfig) { c.Pool = nil },
		"NoLeader":       func(c *PollerConfig) { c.Leader = nil },
		"ShortPoll":      func(c *PollerConfig) { c.PollTimeout = 500 * time.Millisecond },
		"LongPoll":       func(c *PollerConfig) { c.PollTimeout = time.Minute },
		"NegativeBackof": func(c *PollerConfig) { c.ErrorBackoff = -time.Second },
	} {
		cfg := valid
		mod(&cfg)
		_, err := NewPoller(cfg)
		require.Error(t, err, name)
	}

	// Two bots share one registry.
	reg := prometheus.NewRegistry()
	for _, bot := range []string{"a", "b"} {
		cfg := valid
		cfg.Bot, cfg.Registerer = bot, reg
		_, err := NewPoller(cfg)
		require.NoError(t, err)
	}
	require.NoError(t, reg.Register(OffCollector("c")))
	require.Equal(t, 0.0, gaugeValue(t, reg, metricPolling, "c", ""))
	require.Equal(t, BotStatus{Bot: "c", State: StateOff}, OffStatus("c"))
}

// gaugeValue reads one sample of metric for bot (and kind, when set) from
// reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, metric, bot, kind string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["bot"] != bot || (kind != "" && labels["kind"] != kind) {
				continue
			}
			switch {
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no sample of %s{bot=%q,kind=%q}", metric, bot, kind)
	return 0
}
