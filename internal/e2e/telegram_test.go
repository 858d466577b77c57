package e2e_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/internal/testkit/telegramtest"
	"github.com/ferryq/ferry/telegram"
)

// The Telegram capability with real worker processes and a fake Bot API in
// the test process: one getUpdates consumer per token however many replicas
// run, every update stored once across a crash of the leader, the token never
// printed anywhere, a bot without a token off and harmless, and a Go command
// router answering through sendMessage.

const (
	// botWorkerPkg is a service that embeds ferry with a Telegram command
	// router for the bot "desk" (see its doc).
	botWorkerPkg = "./internal/e2e/testdata/botworker"
	// deskToken is the bot's token (DESK_TOKEN); tokenFragment is a part of
	// it that no scrubbed form keeps, so that finding it anywhere is a leak
	// (the bare token, bot<token>, or an escaped form).
	deskToken     = "987654:TOKEN-must-not-leak-XyZ"
	tokenFragment = "must-not-leak"
	// deskConfig is the config file of every test: one bot, a 2 s long poll.
	deskConfig = "telegram:\n  bots:\n    - {name: desk, token_env: DESK_TOKEN, timeout: 2s}\n"
	// tgWait bounds a wait for the poller to catch up with the fake.
	tgWait = 15 * time.Second
)

// tgUpdate is a text message update with id (also its message_id).
func tgUpdate(id int) string {
	return fmt.Sprintf(`{"update_id":%d,"message":{"message_id":%d,"chat":{"id":42,"type":"private"},"from":{"id":7,"is_bot":false,"first_name":"A"},"text":"update %d","date":1}}`, id, id, id)
}

// deskEnv is the environment of a worker running the bot desk on api; the
// token is set unless withToken is false.
func deskEnv(t *testing.T, api *telegramtest.BotAPI, withToken bool, extra ...string) []string {
	t.Helper()
	e := []string{"FERRY_CONFIG=" + writeConfig(t, deskConfig), "FERRY_TELEGRAM_API_URL=" + api.URL()}
	if withToken {
		e = append(e, "DESK_TOKEN="+deskToken)
	}
	return append(e, extra...)
}

// startDeskWorker starts `worker run` with the bot desk on api and 1 s
// election ticks, and waits for it to start polling.
func startDeskWorker(t *testing.T, url string, api *telegramtest.BotAPI) *proctest.Proc {
	t.Helper()
	w := startWorker(t, url, deskEnv(t, api, true), electionArgs(time.Second)...)
	_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("telegram: polling", "bot", "desk"))
	require.NoError(t, err)
	return w
}

// adminAddr reads the admin server's bound address from its log line.
func adminAddr(t *testing.T, p *proctest.Proc) string {
	t.Helper()
	line, err := p.WaitForLineFunc(5*time.Second, logtest.Logged("admin: listening"))
	require.NoError(t, err)
	var rec struct {
		Addr string `json:"addr"`
	}
	require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
	require.True(t, strings.HasPrefix(rec.Addr, "127.0.0.1:"), rec.Addr)
	return rec.Addr
}

// adminGet GETs path on the admin server at addr, requires 200, and returns
// the body.
func adminGet(t *testing.T, addr, path string) string {
	t.Helper()
	// No keep-alive: no idle connection left for goleak to find.
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "GET %s: %s", path, body)
	return string(body)
}

// adminTelegram GETs /admin/api/telegram and returns the body and what it
// says.
func adminTelegram(t *testing.T, addr string) (string, []telegram.BotStatus) {
	t.Helper()
	body := adminGet(t, addr, "/admin/api/telegram")
	var bots []telegram.BotStatus
	require.NoError(t, json.Unmarshal([]byte(body), &bots), body)
	return body, bots
}

// waitAdminTelegram polls /admin/api/telegram until the one bot's status
// satisfies ok, and returns the body.
func waitAdminTelegram(t *testing.T, addr, what string, ok func(telegram.BotStatus) bool) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		body, bots := adminTelegram(t, addr)
		require.Len(t, bots, 1, body)
		if ok(bots[0]) {
			return body
		}
		if time.Now().After(deadline) {
			t.Fatalf("/admin/api/telegram: not %s after 5s: %s", what, body)
		}
		time.Sleep(pollEvery)
	}
}

// storedUpdateIDs returns the update ids of the bot desk's outbox messages,
// in the order of the messages' ids.
func storedUpdateIDs(t *testing.T, pool *pgxpool.Pool) []int {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT dedup_key::bigint FROM ferry_outbox WHERE topic = 'telegram.desk' ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var ids []int
	for rows.Next() {
		var id int
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// deskOffset is the bot desk's row of ferry_telegram_offset (zeros when
// there is none).
func deskOffset(t *testing.T, pool *pgxpool.Pool) (next, stored int64) {
	t.Helper()
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT coalesce(max(next_offset), 0), coalesce(max(updates_stored), 0)
		FROM ferry_telegram_offset WHERE bot = 'desk'`).Scan(&next, &stored))
	return next, stored
}

// waitDeskOffset polls until the bot desk's stored next_offset is want (no
// log line at the default level says a batch was stored), and returns the
// stored update ids.
func waitDeskOffset(t *testing.T, pool *pgxpool.Pool, want int64, timeout time.Duration) []int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		next, _ := deskOffset(t, pool)
		if next == want {
			return storedUpdateIDs(t, pool)
		}
		if time.Now().After(deadline) {
			t.Fatalf("next_offset is %d, not %d, after %s; stored update ids: %v", next, want, timeout, storedUpdateIDs(t, pool))
		}
		time.Sleep(pollEvery)
	}
}

func oneTo(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i + 1
	}
	return s
}

// requireNoToken fails if any of outs contains the token, in any form.
func requireNoToken(t *testing.T, outs map[string]string) {
	t.Helper()
	for what, s := range outs {
		require.NotContains(t, s, tokenFragment, "the token in %s", what)
	}
}

// TestTelegram_OneConsumer: two replicas, one bot: only the leader polls,
// never two getUpdates at once (also across a SIGTERM handover), and every
// update is stored once with the offset after the last.
func TestTelegram_OneConsumer(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	api := telegramtest.NewBotAPI(t, deskToken)

	leader := startDeskWorker(t, url, api)
	standby := startWorker(t, url, deskEnv(t, api, true), electionArgs(time.Second)...)
	_, err := standby.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
	require.NoError(t, err)
	require.Equal(t, leader.Pid(), leaderPID(t, url))

	const n = 20
	for i := 1; i <= n; i++ {
		api.Push(tgUpdate(i))
		// The pace is the point: updates arrive while calls are held, and
		// between them.
		time.Sleep(150 * time.Millisecond)
	}
	ids := waitDeskOffset(t, pool, n+1, tgWait)
	require.Equal(t, oneTo(n), ids, "every update once, in order")
	next, stored := deskOffset(t, pool)
	require.EqualValues(t, n+1, next)
	require.EqualValues(t, n, stored, "updates_stored")
	_, err = standby.WaitForLineFunc(0, logtest.Logged("telegram: polling"))
	require.Error(t, err, "the standby never polled")

	// SIGTERM hands over at once: the leader's held call is cancelled with
	// its runnable before it resigns, so the new consumer's first call
	// overlaps nothing.
	require.NoError(t, leader.Signal(syscall.SIGTERM))
	_, err = standby.WaitForLineFunc(10*time.Second, logtest.Logged("telegram: polling", "bot", "desk", "offset", n+1))
	require.NoError(t, err, "the new leader resumes from the stored offset")
	code, err := leader.Wait(stopTimeout)
	require.NoError(t, err)
	require.Zero(t, code)
	api.Push(tgUpdate(n + 1))
	ids = waitDeskOffset(t, pool, n+2, tgWait)
	require.Equal(t, oneTo(n+1), ids)

	stop(t, standby, stopTimeout)
	api.RequireOneConsumer(t)
	requests, polls, _, _ := api.Stats()
	require.Equal(t, requests, polls, "nothing but getUpdates")
	t.Logf("%d getUpdates calls", polls)
}

// TestTelegram_FailoverMidStream kills -9 the polling leader while updates
// stream in: the standby takes over from the stored offset, and every update
// is stored exactly once, in order, with no gap.
func TestTelegram_FailoverMidStream(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	api := telegramtest.NewBotAPI(t, deskToken)

	first := startDeskWorker(t, url, api)
	second := startWorker(t, url, deskEnv(t, api, true), electionArgs(time.Second)...)
	_, err := second.WaitForLineFunc(10*time.Second, logtest.Logged("election: standby"))
	require.NoError(t, err)
	leader, standby := first, second
	require.Equal(t, leader.Pid(), leaderPID(t, url))

	// An update every 100 ms for 8 s.
	const n = 80
	done := make(chan struct{})
	quit := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for i := 1; i <= n; i++ {
			api.Push(tgUpdate(i))
			select {
			case <-tick.C:
			case <-quit:
				return
			}
		}
	}()
	t.Cleanup(func() { close(quit); <-done })

	time.Sleep(3 * time.Second) // mid-stream
	require.NoError(t, leader.Kill())
	killed := time.Now()
	_, err = standby.WaitForLineFunc(10*time.Second, logtest.Logged("telegram: polling", "bot", "desk"))
	require.NoError(t, err)
	t.Logf("the standby polls %s after the kill", time.Since(killed).Round(time.Millisecond))
	_, err = standby.WaitForLineFunc(0, logtest.Logged("election: failover acquired", "deferred", true))
	require.NoError(t, err, "a crashed leader never resigned: the standby defers")
	code, err := leader.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, code)
	require.Equal(t, standby.Pid(), leaderPID(t, url))

	<-done
	ids := waitDeskOffset(t, pool, n+1, tgWait)
	// The messages' ids follow the update ids: exactly once, in order, no
	// gap. (The dedup key's UNIQUE would refuse a second copy anyway; what
	// this shows is that none is missing and none came out of order.)
	require.Equal(t, oneTo(n), ids)
	_, stored := deskOffset(t, pool)
	require.EqualValues(t, n, stored, "updates_stored counts no redelivered update twice")

	// The killed process's held call ends when the kernel closes its socket
	// (the fake's r.Context() is done then), which happens as it dies, over
	// a second before the standby, which defers, sends its first call. A
	// call that overlapped would mean two consumers.
	api.RequireOneConsumer(t)
	stop(t, standby, stopTimeout)
}

// TestTelegram_TokenNeverLogged makes the fake fail in every way, echoing
// the token where a real server or proxy might, and requires that the token
// appears nowhere: not in the worker's output, `enqueue outbox list --json`,
// or /admin/api/telegram. The worker's backoffs (5 s after an error, 60 s
// after 401 or 409) are not settable from its flags, so the 5 s errors share
// one subtest, and 409 and 401 each end a short subtest of their own.
func TestTelegram_TokenNeverLogged(t *testing.T) {
	t.Parallel()

	// checkNoToken reads w's metrics, stops w, and requires that nothing it
	// printed, nor its metrics, nor the outbox listing, nor what its admin
	// API said (bodies), has the token.
	checkNoToken := func(t *testing.T, url string, w *proctest.Proc, addr string, bodies []string) {
		t.Helper()
		metrics := adminGet(t, addr, "/metrics")
		require.Contains(t, metrics, `ferry_telegram_errors_total{bot="desk"`)
		stop(t, w, stopTimeout)
		list, stderr, code := enqueue(t, url, nil, "outbox", "list", "--json")
		require.Zero(t, code, stderr)
		outs := map[string]string{
			"the worker's stdout": w.Stdout(),
			"the worker's stderr": w.Stderr(),
			"enqueue outbox list": list + stderr,
			"/admin/api/telegram": strings.Join(bodies, "\n"),
			"/metrics":            metrics,
		}
		require.Contains(t, w.Stderr(), "[redacted]", "the fake's echoes of the token reached the log, scrubbed")
		requireNoToken(t, outs)
	}

	t.Run("ServerErrors", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		api := telegramtest.NewBotAPI(t, deskToken)
		api.Answer(
			telegramtest.Reply{Status: http.StatusInternalServerError, Body: `{"ok":false,"error_code":500,"description":"Internal Server Error: bot` + deskToken + ` is overloaded"}`},
			telegramtest.Reply{Status: http.StatusOK, Body: "<html><body>Bad gateway for /bot" + deskToken + "/getUpdates</body></html>"},
			telegramtest.Reply{Hangup: true},
		)
		// Then, in one batch, an update without update_id and a valid one.
		api.Push(`{"message":{"message_id":9,"chat":{"id":42,"type":"private"},"text":"no id","date":1}}`, tgUpdate(1))

		w := startDeskWorker(t, url, api)
		addr := adminAddr(t, w)
		var bodies []string
		for _, e := range []struct{ kind, inError string }{
			{telegram.KindServer, "telegram: getUpdates: server (500): Internal Server Error: bot[redacted] is overloaded"},
			{telegram.KindServer, "telegram: getUpdates: server (200): answer is not Bot API JSON: <html><body>Bad gateway for /bot[redacted]/getUpdates"},
			{telegram.KindTransport, "telegram: getUpdates: "},
		} {
			_, err := w.WaitForLineFunc(10*time.Second, func(line string) bool {
				return logtest.Logged("telegram: getUpdates failed", "bot", "desk", "kind", e.kind, "retry_in", 5*time.Second)(line) &&
					strings.Contains(line, e.inError)
			})
			require.NoError(t, err, "kind %s", e.kind)
			bodies = append(bodies, waitAdminTelegram(t, addr, "showing the "+e.kind+" error", func(s telegram.BotStatus) bool {
				return s.LastErrorKind == e.kind && strings.Contains(s.LastError, e.inError) && s.State == telegram.StateBackingOff
			}))
		}

		_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("telegram: malformed update kept in ferry_telegram_malformed", "bot", "desk", "reason", "no update_id"))
		require.NoError(t, err)
		require.Equal(t, []int{1}, waitDeskOffset(t, pool, 2, tgWait), "the valid update after the malformed one is stored")
		require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_telegram_malformed WHERE bot = 'desk' AND update_id IS NULL AND error = 'no update_id' AND raw LIKE '%"no id"%'`))
		bodies = append(bodies, waitAdminTelegram(t, addr, "polling after the malformed update", func(s telegram.BotStatus) bool {
			return s.State == telegram.StatePolling && s.LastErrorKind == telegram.KindMalformed && s.LastUpdateID == 1 && s.NextOffset == 2
		}))

		checkNoToken(t, url, w, addr, bodies)
		api.RequireOneConsumer(t)
	})

	for _, tc := range []struct {
		name, kind, msg string
		reply           telegramtest.Reply
	}{
		{
			name: "Conflict409", kind: telegram.KindConflict,
			msg: "telegram: conflict (409): another getUpdates consumer or a webhook is set for this bot",
			reply: telegramtest.Reply{Status: http.StatusConflict, Body: `{"ok":false,"error_code":409,"description":"Conflict: terminated by other getUpdates request; make sure that only one bot instance is running (token ` +
				deskToken + `)"}`},
		},
		{
			name: "BadToken401", kind: telegram.KindUnauthorized,
			msg: "telegram: bad token (401); polling paused",
			// The query-escaped form of the token (":" as %3A).
			reply: telegramtest.Reply{Status: http.StatusUnauthorized, Body: `{"ok":false,"error_code":401,"description":"Unauthorized: /bot` +
				strings.Replace(deskToken, ":", "%3A", 1) + `/getUpdates"}`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.NewDatabase(t, true)
			api := telegramtest.NewBotAPI(t, deskToken)
			api.Answer(tc.reply)
			w := startDeskWorker(t, url, api)
			addr := adminAddr(t, w)
			line, err := w.WaitForLineFunc(10*time.Second, logtest.Logged(tc.msg, "level", "ERROR", "bot", "desk", "kind", tc.kind, "retry_in", time.Minute))
			require.NoError(t, err)
			require.Contains(t, line, "[redacted]", "the echoed token is scrubbed")
			body := waitAdminTelegram(t, addr, "backing off after "+tc.kind, func(s telegram.BotStatus) bool {
				return s.State == telegram.StateBackingOff && s.LastErrorKind == tc.kind && strings.Contains(s.LastError, "[redacted]")
			})
			// SIGTERM ends the 60 s backoff at once.
			checkNoToken(t, url, w, addr, []string{body})
			_, polls, _, _ := api.Stats()
			require.Equal(t, 1, polls, "no call during the backoff")
		})
	}
}

// TestTelegram_BotOffWhenTokenUnset: a bot whose token variable is unset is
// off: one line says so, the Bot API is never called, the admin API shows it
// off, and jobs are worked as usual.
func TestTelegram_BotOffWhenTokenUnset(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	api := telegramtest.NewBotAPI(t, deskToken)
	w := startWorker(t, url, deskEnv(t, api, false, "FERRY_LOG_LEVEL=debug"), electionArgs(time.Second)...)
	addr := adminAddr(t, w)
	_, err := w.WaitForLineFunc(10*time.Second, logtest.Logged("election: runnables started"))
	require.NoError(t, err, "it leads: a poller, if there were one, would run here")

	id := enqueueID(t, url, "ferry.noop")
	_, err = w.WaitForLineFunc(10*time.Second, logtest.Logged("job: completed", "job_id", id))
	require.NoError(t, err)

	body, bots := adminTelegram(t, addr)
	require.Equal(t, []telegram.BotStatus{{Bot: "desk", State: telegram.StateOff}}, bots, body)
	stop(t, w, stopTimeout)

	var off []string
	for line := range strings.Lines(w.Stdout() + w.Stderr()) {
		if logtest.Logged("telegram: bot off: its token variable is unset")(line) {
			off = append(off, line)
		}
	}
	require.Len(t, off, 1, "one line says the bot is off")
	require.True(t, logtest.Logged("telegram: bot off: its token variable is unset", "bot", "desk", "token_env", "DESK_TOKEN")(off[0]), off[0])
	_, err = w.WaitForLineFunc(0, logtest.Logged("telegram: polling"))
	require.Error(t, err)
	requests, _, _, _ := api.Stats()
	require.Zero(t, requests, "the Bot API was never called")
}

// TestTelegram_CommandAnswered: a service embedding ferry with a command
// router answers "/echo hello world" through a telegram.send job, and the
// delivery to the router's route is delivered.
func TestTelegram_CommandAnswered(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	api := telegramtest.NewBotAPI(t, deskToken)
	bin := proctest.Build(t, botWorkerPkg)[botWorkerPkg]
	w := proctest.Start(t, bin, append([]string{"DATABASE_URL=" + url}, deskEnv(t, api, true)...))
	_, err := w.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	_, err = w.WaitForLineFunc(10*time.Second, logtest.Logged("telegram: polling", "bot", "desk"))
	require.NoError(t, err)

	api.Push(`{"update_id":1,"message":{"message_id":1,"chat":{"id":42,"type":"private"},"from":{"id":7,"is_bot":false,"first_name":"A"},"text":"/echo hello world","date":1}}`)
	require.Equal(t, telegramtest.Message{ChatID: 42, Text: "hello world"}, api.NextSent(t, deliverTimeout))

	var msgID int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT id FROM ferry_outbox WHERE topic = 'telegram.desk' AND dedup_key = '1'`).Scan(&msgID))
	d := waitDelivery(t, pool, msgID, "telegram-desk-commands", deliverTimeout, "delivered", isDelivered)
	require.Equal(t, 1, d.Attempts)
	require.Nil(t, d.LastError)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox_received WHERE consumer = 'telegram-desk-commands' AND event_id = $1`, fmt.Sprint(msgID)))

	// A reply Telegram refuses for good (400, its description echoing the
	// token): the delivery to the router is done (the reply was queued in
	// its transaction), and the reply's telegram.send job is cancelled at
	// once, its error scrubbed.
	api.AnswerSend(telegramtest.Reply{Status: http.StatusBadRequest, Body: `{"ok":false,"error_code":400,"description":"Bad Request: chat not found (bot` + deskToken + `)"}`})
	api.Push(`{"update_id":2,"message":{"message_id":2,"chat":{"id":43,"type":"private"},"from":{"id":7,"is_bot":false,"first_name":"A"},"text":"/echo nobody there","date":1}}`)
	ids := waitDeskOffset(t, pool, 3, tgWait)
	require.Equal(t, []int{1, 2}, ids)
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT id FROM ferry_outbox WHERE topic = 'telegram.desk' AND dedup_key = '2'`).Scan(&msgID))
	d = waitDelivery(t, pool, msgID, "telegram-desk-commands", deliverTimeout, "delivered", isDelivered)
	require.Equal(t, 1, d.Attempts)
	var sendID int64
	require.Eventually(t, func() bool {
		return pool.QueryRow(context.Background(), `SELECT id FROM river_job
			WHERE kind = 'telegram.send' AND args->>'update_id' = '2' AND state = 'cancelled'`).Scan(&sendID) == nil
	}, deliverTimeout, pollEvery, "the refused reply's telegram.send job is cancelled")
	send := getJob(t, pool, sendID)
	require.Equal(t, 1, send.Attempt, "cancelled at once, not retried")
	var lastErr string
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT errors[array_length(errors, 1)]->>'error' FROM river_job WHERE id = $1`, sendID).Scan(&lastErr))
	require.Contains(t, lastErr, "bad_request (400): Bad Request: chat not found (bot[redacted])")
	list, stderr, code := enqueue(t, url, nil, "outbox", "list", "--json")
	require.Zero(t, code, stderr)
	got, stderr, code := enqueue(t, url, nil, "jobs", "get", fmt.Sprint(sendID), "--json")
	require.Zero(t, code, stderr)
	require.Contains(t, got, "bot[redacted]")

	stop(t, w, stopTimeout)
	require.Len(t, api.Sent(), 1, "one reply")
	requireNoToken(t, map[string]string{"the service's stdout": w.Stdout(), "the service's stderr": w.Stderr(), "enqueue outbox list": list, "enqueue jobs get": got})
	api.RequireOneConsumer(t)
}
