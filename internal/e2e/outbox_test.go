package e2e_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/internal/testkit/proctest"
	"github.com/ferryq/ferry/outbox"
)

// The outbox's once-only guarantees with real processes: a Go handler's
// effect commits with the delivery or not at all, whatever kills the
// process; a webhook receiver that dedups on Ferry-Event-Id keeps one effect
// however many times the wire redelivers; a delivery that keeps failing is
// stuck, visible, and comes back with `enqueue outbox reset`.

const (
	// handlerWorkerPkg is a service that embeds ferry with a Go outbox
	// handler (see its doc).
	handlerWorkerPkg = "./internal/e2e/testdata/handlerworker"
	// hookSecret signs the webhook requests (HOOK_SECRET in the worker's
	// environment, named by the route's secret_env).
	hookSecret = "e2e-hook-secret"
	// deliverTimeout bounds a wait for a delivery that should happen at
	// once (the relay is woken by NOTIFY, the worker polls every 100 ms).
	deliverTimeout = 10 * time.Second
	// retryTimeout stops a test whose retry never comes: the first retry
	// waits the backoff's first step (5 s ±10 %) on River's schedule.
	retryTimeout = deliverTimeout + 10*time.Second
)

// startHandlerWorker starts the handlerworker binary on database url with
// extra environment (HANDLER_HOLD=1, HANDLER_FAIL_AFTER_EFFECT=1), and waits
// for its "ferry: started" line.
func startHandlerWorker(t *testing.T, url string, extraEnv ...string) *proctest.Proc {
	t.Helper()
	bin := proctest.Build(t, handlerWorkerPkg)[handlerWorkerPkg]
	p := proctest.Start(t, bin, append([]string{"DATABASE_URL=" + url}, extraEnv...))
	_, err := p.WaitForLineFunc(startTimeout, logtest.Logged("ferry: started"))
	require.NoError(t, err)
	return p
}

// createEffects creates the table the handlerworker's handler writes.
func createEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `CREATE TABLE effects (event_id text PRIMARY KEY, payload jsonb)`)
	require.NoError(t, err)
}

// insertMessage writes one order.placed message with plain SQL, as a
// service in another language would, and returns its id.
func insertMessage(t *testing.T, pool *pgxpool.Pool, payload string) int64 {
	t.Helper()
	var id int64
	require.NoError(t, pool.QueryRow(context.Background(),
		`INSERT INTO ferry_outbox (topic, payload) VALUES ('order.placed', $1) RETURNING id`, payload).Scan(&id))
	return id
}

// addMessage writes one order.placed message with `enqueue outbox add` and
// returns the id it prints.
func addMessage(t *testing.T, url, payload string) int64 {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, "outbox", "add", "order.placed", "--payload", payload)
	require.Zero(t, code, "enqueue outbox add: %s", stderr)
	id, err := strconv.ParseInt(strings.TrimSpace(oneLine(t, stdout)), 10, 64)
	require.NoError(t, err, "enqueue outbox add printed %q", stdout)
	return id
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), sql, args...).Scan(&n), sql)
	return n
}

// delivery is a row of ferry_outbox_delivery with its message's status.
type delivery struct {
	Status        string
	Attempts      int
	LastError     *string
	JobID         int64
	DeliveredAt   *time.Time
	MessageStatus string
}

// getDelivery reads the delivery of message msgID to route; found is false
// while the relay has not recorded it.
func getDelivery(t *testing.T, pool *pgxpool.Pool, msgID int64, route string) (d delivery, found bool) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `
		SELECT d.status, d.attempts, d.last_error, d.job_id, d.delivered_at, o.status
		FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id
		WHERE d.message_id = $1 AND d.route = $2`, msgID, route).
		Scan(&d.Status, &d.Attempts, &d.LastError, &d.JobID, &d.DeliveredAt, &d.MessageStatus)
	if errors.Is(err, pgx.ErrNoRows) {
		return delivery{}, false
	}
	require.NoError(t, err, "read the delivery of message %d to %s", msgID, route)
	return d, true
}

// mustDelivery is getDelivery for a delivery that must exist.
func mustDelivery(t *testing.T, pool *pgxpool.Pool, msgID int64, route string) delivery {
	t.Helper()
	d, found := getDelivery(t, pool, msgID, route)
	require.True(t, found, "message %d has no delivery to %s", msgID, route)
	return d
}

// waitDelivery polls the delivery of msgID to route every pollEvery until ok
// holds (no log line says that a delivery was recorded), and returns it.
func waitDelivery(t *testing.T, pool *pgxpool.Pool, msgID int64, route string, timeout time.Duration, what string, ok func(delivery) bool) delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, found := getDelivery(t, pool, msgID, route)
		if found && ok(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("message %d, route %s: not %s after %s; last seen (found %t) %+v", msgID, route, what, timeout, found, d)
		}
		time.Sleep(pollEvery)
	}
}

func isDelivered(d delivery) bool { return d.Status == "delivered" }

// waitFailed waits until attempt number attempt of msgID's delivery to
// route has failed and both sides have recorded it (ferry: attempts in
// ferry_outbox_delivery; River: the job no longer running, with that
// attempt), and returns the delivery as it was after the failure. The
// retry then comes on River's own schedule, after the backoff's first step
// (5 s ±10 %): wait for it with retryTimeout.
func waitFailed(t *testing.T, pool *pgxpool.Pool, msgID int64, route string, attempt int) delivery {
	t.Helper()
	d := waitDelivery(t, pool, msgID, route, deliverTimeout, fmt.Sprintf("failed %d time(s)", attempt), func(d delivery) bool {
		return d.Status == "pending" && d.Attempts == attempt
	})
	deadline := time.Now().Add(5 * time.Second)
	for {
		j := getJob(t, pool, d.JobID)
		if j.Attempt == attempt && (j.State == "retryable" || j.State == "available") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d: not waiting for its retry after attempt %d: %+v", d.JobID, attempt, j)
		}
		time.Sleep(pollEvery)
	}
	return d
}

// hookRequest is one request a test's webhook receiver took.
type hookRequest struct {
	EventID, Topic, Route string
	Body                  []byte
	// VerifyErr is outbox.Verify's verdict on the signature; nil is good.
	VerifyErr error
}

// hook is a webhook receiver on a loopback httptest server. It checks each
// request with outbox.Verify (a bad signature is answered 401), records it,
// and lets answer, given the request's 1-based number, write the response.
type hook struct {
	*httptest.Server
	got  chan hookRequest
	mu   sync.Mutex
	reqs []hookRequest
}

func newHook(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, req hookRequest, n int)) *hook {
	t.Helper()
	h := &hook{got: make(chan hookRequest, 64)}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, body, err := outbox.Verify(r, []byte(hookSecret), 0)
		req := hookRequest{
			EventID:   r.Header.Get(outbox.EventIDHeader),
			Topic:     r.Header.Get(outbox.TopicHeader),
			Route:     r.Header.Get(outbox.RouteHeader),
			Body:      body,
			VerifyErr: err,
		}
		h.mu.Lock()
		h.reqs = append(h.reqs, req)
		n := len(h.reqs)
		h.mu.Unlock()
		select {
		case h.got <- req:
		default:
		}
		if err != nil {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		answer(w, r, req, n)
	}))
	t.Cleanup(h.Close)
	return h
}

// requests returns what the receiver has taken so far.
func (h *hook) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.reqs...)
}

// next waits for the receiver's next request.
func (h *hook) next(t *testing.T, timeout time.Duration) hookRequest {
	t.Helper()
	select {
	case req := <-h.got:
		return req
	case <-time.After(timeout):
		t.Fatalf("the receiver got no request in %s", timeout)
		return hookRequest{}
	}
}

// hookConfig writes a config file routing order.placed to url/hook (route
// "hook", signed with HOOK_SECRET) with the request timeout given.
func hookConfig(t *testing.T, url, timeout string) string {
	t.Helper()
	return writeConfig(t, fmt.Sprintf(`
outbox:
  routes:
    - topic: order.placed
      name: hook
      url: %s/hook
      timeout: %s
      secret_env: HOOK_SECRET
`, url, timeout))
}

// startHookWorker starts `worker run` with the config file cfg and the
// route's secret, and extra arguments.
func startHookWorker(t *testing.T, url, cfg string, extraEnv []string, args ...string) *proctest.Proc {
	t.Helper()
	return startWorker(t, url, append([]string{"FERRY_CONFIG=" + cfg, "HOOK_SECRET=" + hookSecret}, extraEnv...), args...)
}

// outboxList runs `enqueue outbox list --json` with args.
func outboxList(t *testing.T, url string, args ...string) []outbox.Delivery {
	t.Helper()
	stdout, stderr, code := enqueue(t, url, nil, append([]string{"outbox", "list", "--json"}, args...)...)
	require.Zero(t, code, "enqueue outbox list: %s", stderr)
	var list []outbox.Delivery
	require.NoError(t, json.Unmarshal([]byte(stdout), &list), stdout)
	return list
}

// TestOutbox_GoHandlerKilledBetweenEffectAndCompletion kills -9 a service
// whose Go handler has written its effect in the delivery's transaction but
// not committed it, then starts another process, which leads, takes the
// killed worker's running job back (ferry's rescue) and redelivers: the
// effect happens exactly once (the handler's plain INSERT would fail on a
// second one).
func TestOutbox_GoHandlerKilledBetweenEffectAndCompletion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	createEffects(t, pool)

	first := startHandlerWorker(t, url, "HANDLER_HOLD=1")
	firstID := workerClientID(t, first)
	id := insertMessage(t, pool, `{"order_id":1}`)
	eventID := strconv.FormatInt(id, 10)
	_, err := first.WaitForLineFunc(deliverTimeout, logtest.Logged("handler: effect written", "event_id", id))
	require.NoError(t, err)
	d := mustDelivery(t, pool, id, "effects")

	require.NoError(t, first.Kill())
	code, err := first.Wait(stopTimeout)
	require.NoError(t, err)
	require.Equal(t, 137, code, "killed by SIGKILL")

	require.Zero(t, count(t, pool, `SELECT count(*) FROM effects`), "the effect's transaction never committed")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry_outbox_received`))
	d = mustDelivery(t, pool, id, "effects")
	require.Equal(t, "pending", d.Status, "not delivered")
	require.Zero(t, d.Attempts, "the killed attempt was never recorded")
	require.Equal(t, "relayed", d.MessageStatus)
	j := getJob(t, pool, d.JobID)
	require.Equal(t, "running", j.State, "River still has the job as the killed process left it")
	require.Equal(t, 1, j.Attempt)

	// The second process leads once the first's lock is gone, finds the
	// first worker dead and takes its running job back: ferry's rescue,
	// not River's hour.
	second := startHandlerWorker(t, url)
	_, err = second.WaitForLineFunc(rescueWatchdog, logtest.Logged("rescue: orphaned jobs rescued", "worker", firstID, "count", 1, "available", 1))
	require.NoError(t, err)

	d = waitDelivery(t, pool, id, "effects", deliverTimeout, "delivered", isDelivered)
	require.Equal(t, 1, d.Attempts)
	require.Nil(t, d.LastError)
	require.NotNil(t, d.DeliveredAt)
	require.Equal(t, "delivered", d.MessageStatus, "ferry_outbox.status")

	var payload string
	require.NoError(t, pool.QueryRow(ctx, `SELECT payload::text FROM effects WHERE event_id = $1`, eventID).Scan(&payload))
	require.JSONEq(t, `{"order_id":1}`, payload)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM effects`), "one effect")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox_received WHERE consumer = 'effects' AND event_id = $1`, eventID))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox_received`))
	j = waitJobState(t, pool, d.JobID, "completed", 5*time.Second)
	require.Equal(t, 2, j.Attempt, "the killed attempt counts")
	require.Equal(t, 1, j.Errors, "the rescue's")

	stop(t, second, stopTimeout)
}

// TestOutbox_GoHandlerFailsAfterEffect: a handler that fails after writing
// its effect rolls the effect back with the attempt; the retry writes it
// once.
func TestOutbox_GoHandlerFailsAfterEffect(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	createEffects(t, pool)

	w := startHandlerWorker(t, url, "HANDLER_FAIL_AFTER_EFFECT=1")
	id := insertMessage(t, pool, `{"order_id":2}`)

	failed := waitFailed(t, pool, id, "effects", 1)
	require.NotNil(t, failed.LastError)
	require.Contains(t, *failed.LastError, "failing after the effect")
	require.Equal(t, "relayed", failed.MessageStatus)
	require.Zero(t, count(t, pool, `SELECT count(*) FROM effects`), "the failed attempt's effect was rolled back")
	require.Zero(t, count(t, pool, `SELECT count(*) FROM ferry_outbox_received`), "and so was its receipt")

	d := waitDelivery(t, pool, id, "effects", retryTimeout, "delivered", isDelivered)
	require.Equal(t, 2, d.Attempts)
	require.Nil(t, d.LastError)
	require.Equal(t, "delivered", d.MessageStatus)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM effects WHERE event_id = $1`, strconv.FormatInt(id, 10)))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM effects`))
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox_received WHERE consumer = 'effects'`))

	stop(t, w, stopTimeout)
}

// TestOutbox_WebhookTimesOutAfterCommit: the receiver commits its effect,
// then answers too late; the worker times out and redelivers with the same
// Ferry-Event-Id, and the receiver's UNIQUE keeps the effect to one.
func TestOutbox_WebhookTimesOutAfterCommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	_, err := pool.Exec(ctx, `CREATE TABLE received (event_id text PRIMARY KEY)`)
	require.NoError(t, err)

	var (
		effects atomic.Int32 // inserts that took
		dbErr   atomic.Value // the receiver's first database error
	)
	h := newHook(t, func(w http.ResponseWriter, r *http.Request, req hookRequest, n int) {
		// The receiver's effect, committed before it answers.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		tag, err := pool.Exec(rctx, `INSERT INTO received (event_id) VALUES ($1) ON CONFLICT DO NOTHING`, req.EventID)
		cancel()
		if err != nil {
			dbErr.CompareAndSwap(nil, err)
			http.Error(w, "database", http.StatusInternalServerError)
			return
		}
		effects.Add(int32(tag.RowsAffected()))
		if n == 1 {
			// Too slow for the route's 1 s timeout: the worker gives up
			// (and closes the connection, which ends the wait).
			timer := time.NewTimer(3 * time.Second)
			defer timer.Stop()
			select {
			case <-timer.C:
			case <-r.Context().Done():
			}
		}
		w.WriteHeader(http.StatusNoContent)
	})
	worker := startHookWorker(t, url, hookConfig(t, h.URL, "1s"), nil)

	id := addMessage(t, url, `{"order_id":7}`)
	failed := waitFailed(t, pool, id, "hook", 1)
	require.NotNil(t, failed.LastError)
	require.Contains(t, *failed.LastError, "timed out after 1s")

	d := waitDelivery(t, pool, id, "hook", retryTimeout, "delivered", isDelivered)
	require.Equal(t, 2, d.Attempts)
	require.Nil(t, d.LastError, "cleared on delivery")
	require.Equal(t, "delivered", d.MessageStatus)

	if err, _ := dbErr.Load().(error); err != nil {
		t.Fatalf("receiver: %v", err)
	}
	reqs := h.requests()
	require.GreaterOrEqual(t, len(reqs), 2)
	for i, req := range reqs {
		require.NoError(t, req.VerifyErr, "request %d: signature", i+1)
		require.Equal(t, strconv.FormatInt(id, 10), req.EventID, "request %d: Ferry-Event-Id", i+1)
		require.Equal(t, "order.placed", req.Topic)
		require.Equal(t, "hook", req.Route)
		require.JSONEq(t, `{"order_id":7}`, string(req.Body))
	}
	require.EqualValues(t, 1, effects.Load(), "one insert took; the redelivery found it")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM received`))

	stdout, stderr, code := enqueue(t, url, nil, "outbox", "stats", "--json")
	require.Zero(t, code, stderr)
	var stats []outbox.Stat
	require.NoError(t, json.Unmarshal([]byte(stdout), &stats), stdout)
	require.NotContains(t, stdout, `"route": ""`, "a row of messages has no route, and says what it counts")
	require.Contains(t, stdout, `"of": "messages"`)
	require.ElementsMatch(t, []outbox.Stat{
		{Topic: "order.placed", Route: "", Status: "delivered", Count: 1, Of: outbox.StatMessages},
		{Topic: "order.placed", Route: "hook", Status: "delivered", Count: 1, Of: outbox.StatDeliveries},
	}, stats)

	stop(t, worker, stopTimeout)
}

// TestOutbox_StuckThenReset: a delivery that fails FERRY_OUTBOX_MAX_ATTEMPTS
// times is stuck with its last error and its message kept; once the
// receiver is back, `enqueue outbox reset` delivers it, attempts kept as
// history.
func TestOutbox_StuckThenReset(t *testing.T) {
	t.Parallel()

	// waitStuck waits for the delivery to be stuck after two attempts, the
	// retry on River's schedule, and checks what `enqueue outbox list` says.
	waitStuck := func(t *testing.T, url string, pool *pgxpool.Pool, id int64, wantErr string) {
		t.Helper()
		waitFailed(t, pool, id, "hook", 1)
		d := waitDelivery(t, pool, id, "hook", retryTimeout, "stuck", func(d delivery) bool { return d.Status == "stuck" })
		require.Equal(t, 2, d.Attempts)
		require.NotNil(t, d.LastError)
		require.Contains(t, *d.LastError, wantErr)
		require.Contains(t, *d.LastError, "(attempt 2, the last)")
		require.Equal(t, "stuck", d.MessageStatus)
		waitJobState(t, pool, d.JobID, "discarded", 5*time.Second) // its last attempt

		list := outboxList(t, url, "--status", "stuck")
		require.Len(t, list, 1)
		got := list[0]
		require.Equal(t, id, got.MessageID)
		require.Equal(t, "order.placed", got.Topic)
		require.Equal(t, "stuck", got.MessageStatus)
		require.NotNil(t, got.Route)
		require.Equal(t, "hook", *got.Route)
		require.NotNil(t, got.Status)
		require.Equal(t, "stuck", *got.Status)
		require.NotNil(t, got.Attempts)
		require.Equal(t, 2, *got.Attempts)
		require.NotNil(t, got.LastError)
		require.Contains(t, *got.LastError, wantErr)
		require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox WHERE id = $1`, id), "the message is kept")
	}

	t.Run("ClosedPort", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		closed := fmt.Sprintf("http://127.0.0.1:%d", freePort(t))
		w := startHookWorker(t, url, hookConfig(t, closed, "10s"), nil, "--outbox-max-attempts", "2")

		id := addMessage(t, url, `{"order_id":8}`)
		waitStuck(t, url, pool, id, "connection refused")
		stop(t, w, stopTimeout)
	})

	t.Run("ResetOnceReceiverIsBack", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t, true)
		pool := pgtest.PoolFor(t, url)
		var failing atomic.Bool
		failing.Store(true)
		h := newHook(t, func(w http.ResponseWriter, r *http.Request, req hookRequest, n int) {
			if failing.Load() {
				http.Error(w, "receiver down for maintenance", http.StatusServiceUnavailable)
				return
			}
			w.WriteHeader(http.StatusNoContent)
		})
		worker := startHookWorker(t, url, hookConfig(t, h.URL, "10s"), []string{"FERRY_OUTBOX_MAX_ATTEMPTS=2"})

		id := addMessage(t, url, `{"order_id":9}`)
		waitStuck(t, url, pool, id, "status 503: receiver down for maintenance")
		require.Len(t, h.requests(), 2)

		failing.Store(false)
		stdout, stderr, code := enqueue(t, url, nil, "outbox", "reset", strconv.FormatInt(id, 10))
		require.Zero(t, code, "enqueue outbox reset: %s", stderr)
		require.Equal(t, fmt.Sprintf("message %d: 1 stuck delivery back to pending, to be delivered again\n", id), stdout)

		d := waitDelivery(t, pool, id, "hook", deliverTimeout, "delivered", isDelivered)
		require.Equal(t, 3, d.Attempts, "the two failed attempts are kept as history")
		require.Nil(t, d.LastError)
		require.Equal(t, "delivered", d.MessageStatus)
		reqs := h.requests()
		require.Len(t, reqs, 3)
		for _, req := range reqs {
			require.NoError(t, req.VerifyErr)
			require.Equal(t, strconv.FormatInt(id, 10), req.EventID)
		}
		require.Empty(t, outboxList(t, url, "--status", "stuck"))
		stop(t, worker, stopTimeout)
	})
}

// TestOutbox_PlainSQLWriterDelivered: a message written with plain SQL over
// a pgx connection, no ferry code, is relayed and delivered; a plain-SQL
// write that breaks the rules fails with the database's check and writes
// nothing.
func TestOutbox_PlainSQLWriterDelivered(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t, true)
	pool := pgtest.PoolFor(t, url)
	h := newHook(t, func(w http.ResponseWriter, r *http.Request, req hookRequest, n int) {
		w.WriteHeader(http.StatusNoContent)
	})
	worker := startHookWorker(t, url, hookConfig(t, h.URL, "10s"), nil)

	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	var id int64
	require.NoError(t, conn.QueryRow(ctx, `INSERT INTO ferry_outbox (topic, payload, dedup_key)
		VALUES ('order.placed', '{"order_id": 5}', 'order-5') RETURNING id`).Scan(&id))

	req := h.next(t, deliverTimeout)
	require.NoError(t, req.VerifyErr)
	require.Equal(t, strconv.FormatInt(id, 10), req.EventID)
	require.Equal(t, "order.placed", req.Topic)
	require.Equal(t, "hook", req.Route)
	require.JSONEq(t, `{"order_id": 5}`, string(req.Body))

	d := waitDelivery(t, pool, id, "hook", deliverTimeout, "delivered", isDelivered)
	require.Equal(t, 1, d.Attempts)
	require.Equal(t, "delivered", d.MessageStatus)

	_, err = conn.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload) VALUES ('order placed', '{"order_id": 6}')`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "23514", pgErr.Code, "check_violation")
	require.Equal(t, "ferry_outbox_topic_format", pgErr.ConstraintName)
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox`), "the bad insert wrote nothing")
	require.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ferry_outbox_delivery`))
	require.Len(t, h.requests(), 1)

	stop(t, worker, stopTimeout)
}
