package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
	"github.com/ferryq/ferry/jobs"
)

// deliverBundle is what a delivery test works with: the package's database
// (messages are told apart by id) and the worker's log.
type deliverBundle struct {
	pool *pgxpool.Pool
	logs *logtest.Recorder
}

func deliverSetup(t *testing.T) *deliverBundle {
	t.Helper()
	return &deliverBundle{pool: pgtest.Pool(t), logs: &logtest.Recorder{}}
}

// worker returns a worker for routes; cfg's Pool, Routes and Logger are
// filled in.
func (b *deliverBundle) worker(t *testing.T, cfg DeliverConfig, routes ...Route) *DeliverWorker {
	t.Helper()
	rs, err := NewRoutes(routes...)
	require.NoError(t, err)
	cfg.Pool, cfg.Routes = b.pool, rs
	cfg.Logger = b.logs.Logger()
	return NewDeliverWorker(cfg)
}

// seed writes a relayed message of topic with one pending delivery per
// route, as the relay leaves them.
func (b *deliverBundle) seed(t *testing.T, topic, payload string, routes ...string) int64 {
	t.Helper()
	ctx := context.Background()
	var id int64
	require.NoError(t, b.pool.QueryRow(ctx, `INSERT INTO ferry_outbox (topic, payload, status, relayed_at)
		VALUES ($1, $2, 'relayed', now()) RETURNING id`, topic, payload).Scan(&id))
	for _, r := range routes {
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox_delivery (message_id, route) VALUES ($1, $2)`, id, r)
		require.NoError(t, err)
	}
	return id
}

type deliveryRow struct {
	Status        string
	Attempts      int
	LastError     *string
	NextAttemptAt *time.Time
	DeliveredAt   *time.Time
}

func (b *deliverBundle) delivery(t *testing.T, id int64, route string) deliveryRow {
	t.Helper()
	var d deliveryRow
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, attempts, last_error, next_attempt_at, delivered_at
		FROM ferry_outbox_delivery WHERE message_id = $1 AND route = $2`, id, route).
		Scan(&d.Status, &d.Attempts, &d.LastError, &d.NextAttemptAt, &d.DeliveredAt))
	return d
}

type messageRow struct {
	Status      string
	LastError   *string
	DeliveredAt *time.Time
}

func (b *deliverBundle) message(t *testing.T, id int64) messageRow {
	t.Helper()
	var m messageRow
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT status, last_error, delivered_at FROM ferry_outbox WHERE id = $1`, id).
		Scan(&m.Status, &m.LastError, &m.DeliveredAt))
	return m
}

var deliverJobSeq atomic.Int64

// deliverJob is a job as River hands it to Work, for calls outside River.
func deliverJob(id int64, route string, attempt, maxAttempts int) *river.Job[DeliverArgs] {
	return &river.Job[DeliverArgs]{
		JobRow: &rivertype.JobRow{
			ID: 1_000_000 + deliverJobSeq.Add(1), Kind: "outbox.deliver", State: rivertype.JobStateRunning,
			Attempt: attempt, MaxAttempts: maxAttempts,
		},
		Args: DeliverArgs{MessageID: id, Route: route},
	}
}

func requireJobCancel(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.ErrorIs(t, err, &rivertype.JobCancelError{}, "want a cancel (no retry), got %v", err)
}

func requireJobRetry(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	require.NotErrorIs(t, err, &rivertype.JobCancelError{}, "want a retried error, got a cancel: %v", err)
}

// hookServer answers every request with handler, closed when the test ends.
func hookServer(t *testing.T, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

func statusHook(t *testing.T, status int, body string) *httptest.Server {
	t.Helper()
	return hookServer(t, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = io.WriteString(w, body)
	})
}

// seenRequest is a request a test's receiver took.
type seenRequest struct {
	header http.Header
	body   []byte
}

const (
	testSecret = "s3cret-route-key"
	testQuery  = "t0ken-in-query"
	testTopic  = "order.placed"
)

// hookRoute is a webhook route named name to srv, with a secret and a
// credential in the query string (both must stay out of last_error).
func hookRoute(srv *httptest.Server, name string) Route {
	return Route{Topic: testTopic, Name: name, URL: srv.URL + "/hook?token=" + testQuery, Secrets: [][]byte{[]byte(testSecret)}}
}

func TestDeliverArgs_Kind(t *testing.T) {
	t.Parallel()
	require.Equal(t, "outbox.deliver", DeliverArgs{}.Kind())
}

func TestDeliverWorker_Kind(t *testing.T) {
	t.Parallel()
	w := deliverSetup(t).worker(t, DeliverConfig{})
	k := w.Kind()
	require.Equal(t, "outbox.deliver", k.Name)
	require.Equal(t, "outbox", k.Queue)
	require.Equal(t, "delivers one outbox message to one route", k.Description)
	var reg jobs.Registry
	require.NoError(t, reg.Add(k))
	_, err := reg.Workers()
	require.NoError(t, err)
}

func TestDeliverWorker_NextRetry(t *testing.T) {
	t.Parallel()
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	w := deliverSetup(t).worker(t, DeliverConfig{Now: func() time.Time { return now }})
	table := map[int]time.Duration{1: 5 * time.Second, 2: 15 * time.Second, 3: time.Minute, 4: 5 * time.Minute, 5: 15 * time.Minute, 6: time.Hour, 7: time.Hour, 8: time.Hour}
	for attempt := 1; attempt <= 8; attempt++ {
		want := table[attempt]
		seen := map[time.Time]bool{}
		for range 50 {
			at := w.NextRetry(deliverJob(1, "r", attempt, 24))
			d := at.Sub(now)
			require.GreaterOrEqual(t, d, want-want/10, "attempt %d", attempt)
			require.LessOrEqual(t, d, want+want/10, "attempt %d", attempt)
			seen[at] = true
		}
		require.Greater(t, len(seen), 1, "attempt %d: jitter", attempt)
	}
}

func TestDeliverWorker_Timeout(t *testing.T) {
	t.Parallel()
	w := deliverSetup(t).worker(t, DeliverConfig{},
		Route{Topic: testTopic, Name: "quick", URL: "http://127.0.0.1:1/", Timeout: 2 * time.Second},
		Route{Topic: testTopic, Name: "default", URL: "http://127.0.0.1:1/"},
	)
	// The route's timeout, the margin, and the ordered chain's budget.
	require.Equal(t, 7*time.Second+DefaultChainBudget, w.Timeout(deliverJob(1, "quick", 1, 24)))
	require.Equal(t, DefaultRouteTimeout+5*time.Second+DefaultChainBudget, w.Timeout(deliverJob(1, "default", 1, 24)))
	require.Equal(t, 15*time.Second, w.Timeout(deliverJob(1, "unknown", 1, 24)))
	unchained := deliverSetup(t).worker(t, DeliverConfig{ChainBudget: -1},
		Route{Topic: testTopic, Name: "quick", URL: "http://127.0.0.1:1/", Timeout: 2 * time.Second})
	require.Equal(t, 7*time.Second, unchained.Timeout(deliverJob(1, "quick", 1, 24)))
}

// TestDeliverWorker_Webhook calls Work directly (a webhook needs nothing of
// River's) and checks what it records.
func TestDeliverWorker_Webhook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("Delivered", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusNoContent, "")
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{"order_id": 42}`, "billing")

		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		d := b.delivery(t, id, "billing")
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Nil(t, d.LastError)
		require.Nil(t, d.NextAttemptAt)
		require.NotNil(t, d.DeliveredAt)
		m := b.message(t, id)
		require.Equal(t, "delivered", m.Status)
		require.NotNil(t, m.DeliveredAt)
		require.Contains(t, b.logs.String(), `"msg":"outbox: delivered"`)
		require.Contains(t, b.logs.String(), `"status_code":204`)
	})

	t.Run("MessageDeliveredAfterEveryRoute", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusOK, "")
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"), hookRoute(srv, "shipping"))
		id := b.seed(t, testTopic, `{}`, "billing", "shipping")

		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		require.Equal(t, "delivered", b.delivery(t, id, "billing").Status)
		require.Equal(t, "relayed", b.message(t, id).Status)

		require.NoError(t, w.Work(ctx, deliverJob(id, "shipping", 1, 24)))
		require.Equal(t, "delivered", b.message(t, id).Status)
	})

	t.Run("ConcurrentRoutes", func(t *testing.T) {
		t.Parallel()
		// Routes finishing together: the last one to record sees the
		// others (the message row lock), so the message is delivered.
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusOK, "")
		names := []string{"r1", "r2", "r3", "r4", "r5", "r6"}
		var routes []Route
		for _, n := range names {
			routes = append(routes, hookRoute(srv, n))
		}
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, routes...)
		for range 5 {
			id := b.seed(t, testTopic, `{}`, names...)
			var wg sync.WaitGroup
			for _, n := range names {
				wg.Go(func() { require.NoError(t, w.Work(ctx, deliverJob(id, n, 1, 24))) })
			}
			wg.Wait()
			require.Equal(t, "delivered", b.message(t, id).Status)
		}
	})

	t.Run("Request", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		type seen struct {
			method, path, eventID, body string
			header                      http.Header
			verifyErr                   error
		}
		got := make(chan seen, 1)
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			eventID, body, err := Verify(r, []byte(testSecret), 0)
			got <- seen{r.Method, r.URL.Path, eventID, string(body), r.Header.Clone(), err}
			w.WriteHeader(http.StatusOK)
		})
		route := hookRoute(srv, "billing")
		route.Headers = map[string]string{"X-Tenant": "acme", "Ferry-Event-Id": "forged"}
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, route)
		id := b.seed(t, testTopic, `{"order_id": 42, "items": ["a", "b"]}`, "billing")

		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		s := <-got
		require.NoError(t, s.verifyErr)
		require.Equal(t, http.MethodPost, s.method)
		require.Equal(t, "/hook", s.path)
		require.Equal(t, fmt.Sprint(id), s.eventID)
		var payload string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT payload::text FROM ferry_outbox WHERE id = $1", id).Scan(&payload))
		require.Equal(t, payload, s.body)
		require.JSONEq(t, `{"order_id": 42, "items": ["a", "b"]}`, s.body)
		require.Equal(t, fmt.Sprint(id), s.header.Get("Ferry-Event-Id"), "route headers do not override ferry's")
		require.Equal(t, testTopic, s.header.Get("Ferry-Topic"))
		require.Equal(t, "billing", s.header.Get("Ferry-Route"))
		require.Equal(t, "application/json", s.header.Get("Content-Type"))
		require.Equal(t, "ferry-outbox", s.header.Get("User-Agent"))
		require.Equal(t, "acme", s.header.Get("X-Tenant"))
		require.Regexp(t, `^t=\d+,v1=[0-9a-f]{64}$`, s.header.Get("Ferry-Signature"))

		// Standard Webhooks: the same event id, the attempt's time, and a
		// signature (the official libraries verify real deliveries in
		// internal/e2e's TestOutbox_StandardWebhooksRotation; this module
		// stays free of their module).
		require.Equal(t, fmt.Sprint(id), s.header.Get("webhook-id"))
		require.Regexp(t, `^\d+$`, s.header.Get("webhook-timestamp"))
		require.Regexp(t, `^v1,[A-Za-z0-9+/]{43}=$`, s.header.Get("webhook-signature"))
	})

	t.Run("RotationSignsWithEverySecret", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		got := make(chan seenRequest, 1)
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			got <- seenRequest{header: r.Header.Clone(), body: body}
		})
		const newSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
		keys, err := ParseSecrets(newSecret + "," + testSecret)
		require.NoError(t, err)
		route := hookRoute(srv, "billing")
		route.Secrets = keys
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, route)
		id := b.seed(t, testTopic, `{"order_id":7}`, "billing")
		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		req := <-got

		require.Len(t, strings.Fields(req.header.Get("webhook-signature")), 2)
		require.Equal(t, 2, strings.Count(req.header.Get("Ferry-Signature"), "v1="))
		// Either secret alone verifies, in both header sets; a third does
		// not.
		for _, secret := range []string{newSecret, testSecret} {
			r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(req.body))
			r.Header = req.header.Clone()
			gotID, _, err := Verify(r, []byte(secret), 0)
			require.NoError(t, err)
			require.Equal(t, fmt.Sprint(id), gotID)
			r = httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(req.body))
			r.Header = req.header.Clone()
			r.Header.Del("webhook-signature")
			_, _, err = Verify(r, []byte(secret), 0)
			require.NoError(t, err, "Ferry-Signature alone")
		}
		r := httptest.NewRequest(http.MethodPost, "/hook", bytes.NewReader(req.body))
		r.Header = req.header.Clone()
		_, _, err = Verify(r, []byte("a-third-secret"), 0)
		require.ErrorIs(t, err, ErrBadSignature)
	})

	t.Run("NoSecretUnsigned", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		sig := make(chan []string, 2)
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("webhook-id") == "" || r.Header.Get("webhook-timestamp") == "" {
				sig <- []string{"no webhook-id or webhook-timestamp"}
				return
			}
			sig <- append(r.Header.Values("Ferry-Signature"), r.Header.Values("webhook-signature")...)
		})
		route := hookRoute(srv, "open")
		route.Secrets = nil
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, route, hookRoute(srv, "signed"))
		require.Equal(t, 1, strings.Count(b.logs.String(), "route has no secret"), b.logs.String())
		require.Contains(t, b.logs.String(), `"route":"open"`)

		for range 2 {
			id := b.seed(t, testTopic, `{}`, "open")
			require.NoError(t, w.Work(ctx, deliverJob(id, "open", 1, 24)))
			require.Empty(t, <-sig)
		}
		require.Equal(t, 1, strings.Count(b.logs.String(), "route has no secret"), "warned once, at construction")
	})

	// requireRetried checks a retried attempt was recorded: pending, one
	// more attempt, next_attempt_at after wantDelay (±10%) and equal to what
	// River will use, last_error free of secrets.
	requireRetried := func(t *testing.T, b *deliverBundle, w *DeliverWorker, job *river.Job[DeliverArgs], err error, now time.Time, wantAttempts int, wantDelay time.Duration) string {
		t.Helper()
		requireJobRetry(t, err)
		d := b.delivery(t, job.Args.MessageID, job.Args.Route)
		require.Equal(t, "pending", d.Status)
		require.Equal(t, wantAttempts, d.Attempts)
		require.NotNil(t, d.LastError)
		require.NotNil(t, d.NextAttemptAt)
		delay := d.NextAttemptAt.Sub(now)
		require.GreaterOrEqual(t, delay, wantDelay-wantDelay/10-time.Millisecond)
		require.LessOrEqual(t, delay, wantDelay+wantDelay/10+time.Millisecond)
		require.WithinDuration(t, w.NextRetry(job), *d.NextAttemptAt, time.Microsecond, "River retries when next_attempt_at says")
		require.Nil(t, d.DeliveredAt)
		require.Equal(t, "relayed", b.message(t, job.Args.MessageID).Status)
		for _, secret := range []string{testSecret, testQuery, "v1=", "v1,"} {
			require.NotContains(t, *d.LastError, secret)
			require.NotContains(t, err.Error(), secret)
			require.NotContains(t, b.logs.String(), secret)
		}
		require.Contains(t, b.logs.String(), `"msg":"outbox: delivery failed"`)
		require.Contains(t, b.logs.String(), `"next_attempt_at"`)
		return *d.LastError
	}

	for _, status := range []int{http.StatusInternalServerError, http.StatusServiceUnavailable, http.StatusTooManyRequests, http.StatusRequestTimeout} {
		t.Run(fmt.Sprintf("Status%dRetried", status), func(t *testing.T) {
			t.Parallel()
			b := deliverSetup(t)
			// A debug page echoing the request: the secret, the signature,
			// the URL, then far more than a snippet.
			srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(status)
				fmt.Fprintf(w, "expected secret %s, got signatures %s and %s for %s\n%s", testSecret, r.Header.Get("Ferry-Signature"), r.Header.Get("webhook-signature"), r.URL, strings.Repeat("x", 5000))
			})
			now := time.Now()
			w := b.worker(t, DeliverConfig{Client: srv.Client(), Now: func() time.Time { return now }}, hookRoute(srv, "billing"))
			id := b.seed(t, testTopic, `{}`, "billing")

			job := deliverJob(id, "billing", 1, 24)
			err := w.Work(ctx, job)
			lastErr := requireRetried(t, b, w, job, err, now, 1, 5*time.Second)
			require.Contains(t, lastErr, fmt.Sprintf("POST %s/hook?…: status %d: expected secret [redacted]", srv.URL, status))
			require.LessOrEqual(t, strings.Count(lastErr, "x"), jobs.SnippetBytes)
			require.LessOrEqual(t, len(lastErr), jobs.SnippetBytes+len("POST "+srv.URL+"/hook?…: status 500: …"))
		})
	}

	t.Run("TimeoutRetried", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			// Read the body first: only then does the server watch the
			// connection and cancel r.Context() when the client gives up.
			_, _ = io.Copy(io.Discard, r.Body)
			select {
			case <-time.After(time.Hour):
			case <-r.Context().Done():
			}
		})
		route := hookRoute(srv, "slow")
		route.Timeout = 200 * time.Millisecond
		now := time.Now()
		w := b.worker(t, DeliverConfig{Client: srv.Client(), Now: func() time.Time { return now }}, route)
		id := b.seed(t, testTopic, `{}`, "slow")

		job := deliverJob(id, "slow", 1, 24)
		start := time.Now()
		err := w.Work(ctx, job)
		require.Less(t, time.Since(start), time.Minute, "the route's timeout cut the hour-long answer (a watchdog, not a measurement)")
		lastErr := requireRetried(t, b, w, job, err, now, 1, 5*time.Second)
		require.Equal(t, fmt.Sprintf("POST %s/hook?…: timed out after 200ms", srv.URL), lastErr)
	})

	t.Run("UnreachableRetried", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := httptest.NewServer(http.NotFoundHandler())
		srv.Close()
		now := time.Now()
		w := b.worker(t, DeliverConfig{Now: func() time.Time { return now }}, hookRoute(srv, "down"))
		id := b.seed(t, testTopic, `{}`, "down")

		job := deliverJob(id, "down", 1, 24)
		lastErr := requireRetried(t, b, w, job, w.Work(ctx, job), now, 1, 5*time.Second)
		require.True(t, strings.HasPrefix(lastErr, "POST "+srv.URL+"/hook?…: "), lastErr)
	})

	t.Run("LaterAttemptsBackOff", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusBadGateway, "")
		now := time.Now()
		w := b.worker(t, DeliverConfig{Client: srv.Client(), Now: func() time.Time { return now }}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		for i, delay := range []time.Duration{5 * time.Second, 15 * time.Second, time.Minute, 5 * time.Minute, 15 * time.Minute, time.Hour, time.Hour} {
			job := deliverJob(id, "billing", i+1, 24)
			requireRetried(t, b, w, job, w.Work(ctx, job), now, i+1, delay)
		}
	})

	// answerRetryAfter works attempt attempt of a delivery to a receiver
	// that answers status with Retry-After retryAfter, the clock at now.
	answerRetryAfter := func(t *testing.T, status int, retryAfter string, now time.Time, attempt int) (*deliverBundle, *DeliverWorker, *river.Job[DeliverArgs], error) {
		t.Helper()
		b := deliverSetup(t)
		srv := hookServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", retryAfter)
			w.WriteHeader(status)
		})
		w := b.worker(t, DeliverConfig{Client: srv.Client(), Now: func() time.Time { return now }}, hookRoute(srv, "billing"))
		job := deliverJob(b.seed(t, testTopic, `{}`, "billing"), "billing", attempt, 24)
		return b, w, job, w.Work(ctx, job)
	}

	t.Run("RetryAfterHonoured", func(t *testing.T) {
		t.Parallel()
		now := time.Now().Truncate(time.Second)
		for _, tc := range []struct {
			status     int
			retryAfter string
			want       time.Duration
			inError    string
		}{
			{http.StatusTooManyRequests, "30", 30 * time.Second, "(Retry-After 30s)"},
			{http.StatusServiceUnavailable, now.Add(2 * time.Minute).UTC().Format(http.TimeFormat), 2 * time.Minute, "(Retry-After 2m0s)"},
			{http.StatusTooManyRequests, "0", time.Second, "(Retry-After 1s)"},
			{http.StatusTooManyRequests, "9999999", 24 * time.Hour, "(Retry-After 24h0m0s)"},
		} {
			// The backoff's own wait after attempt 3 would be 60 s ±10 %.
			b, w, job, err := answerRetryAfter(t, tc.status, tc.retryAfter, now, 3)
			requireJobRetry(t, err)
			d := b.delivery(t, job.Args.MessageID, "billing")
			require.Equal(t, "pending", d.Status)
			require.NotNil(t, d.NextAttemptAt)
			require.Equal(t, tc.want, d.NextAttemptAt.Sub(now), "Retry-After %q on %d, exactly, without jitter", tc.retryAfter, tc.status)
			require.WithinDuration(t, w.NextRetry(job), *d.NextAttemptAt, time.Microsecond, "River retries when next_attempt_at says")
			require.Contains(t, *d.LastError, tc.inError)
		}
	})

	t.Run("RetryAfterIgnored", func(t *testing.T) {
		t.Parallel()
		// On a status other than 429 and 503, or when unreadable, the
		// backoff table decides.
		now := time.Now()
		for _, tc := range []struct {
			status     int
			retryAfter string
		}{
			{http.StatusInternalServerError, "30"},
			{http.StatusTooManyRequests, "soon"},
			{http.StatusServiceUnavailable, "-5"},
		} {
			b, w, job, err := answerRetryAfter(t, tc.status, tc.retryAfter, now, 1)
			lastErr := requireRetried(t, b, w, job, err, now, 1, 5*time.Second)
			require.NotContains(t, lastErr, "Retry-After")
		}
	})

	t.Run("GoneStuck", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusGone, "endpoint retired\n")
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		requireJobCancel(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		d := b.delivery(t, id, "billing")
		require.Equal(t, "stuck", d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, fmt.Sprintf("POST %s/hook?…: status 410: endpoint retired; 410 Gone: the receiver has retired this endpoint, fix or remove the route, then enqueue outbox reset", srv.URL), *d.LastError)
		require.Equal(t, "stuck", b.message(t, id).Status)
	})

	t.Run("NotFoundStuck", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusNotFound, "no such hook\n")
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		err := w.Work(ctx, deliverJob(id, "billing", 1, 24))
		requireJobCancel(t, err)
		d := b.delivery(t, id, "billing")
		require.Equal(t, "stuck", d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Nil(t, d.NextAttemptAt)
		require.Equal(t, fmt.Sprintf("POST %s/hook?…: status 404: no such hook", srv.URL), *d.LastError)
		m := b.message(t, id)
		require.Equal(t, "stuck", m.Status)
		require.Equal(t, "route billing: "+*d.LastError, *m.LastError)
		require.Contains(t, b.logs.String(), `"msg":"outbox: delivery stuck"`)
	})

	t.Run("RedirectStuck", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		var followed atomic.Int64
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/moved" {
				followed.Add(1)
				return
			}
			http.Redirect(w, r, "/moved?token=redirect-secret", http.StatusFound)
		})
		// The default client, not srv's: the worker's own must not follow.
		w := b.worker(t, DeliverConfig{}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		err := w.Work(ctx, deliverJob(id, "billing", 1, 24))
		requireJobCancel(t, err)
		require.Zero(t, followed.Load())
		d := b.delivery(t, id, "billing")
		require.Equal(t, "stuck", d.Status)
		require.Contains(t, *d.LastError, "status 302: redirect to /moved?… not followed")
		require.NotContains(t, *d.LastError, "redirect-secret")
		require.Equal(t, "stuck", b.message(t, id).Status)
	})

	t.Run("RedirectNotFollowedWithGivenClient", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/moved", http.StatusPermanentRedirect)
		})
		client := srv.Client()
		client.CheckRedirect = nil // follows by default
		w := b.worker(t, DeliverConfig{Client: client}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")
		requireJobCancel(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		require.Equal(t, "stuck", b.delivery(t, id, "billing").Status)
	})

	t.Run("MaxAttempts", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusInternalServerError, "down")
		w := b.worker(t, DeliverConfig{Client: srv.Client(), MaxAttempts: 2}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		requireJobRetry(t, w.Work(ctx, deliverJob(id, "billing", 1, 2)))
		require.Equal(t, "pending", b.delivery(t, id, "billing").Status)

		// The last attempt: a plain error, which River discards.
		err := w.Work(ctx, deliverJob(id, "billing", 2, 2))
		requireJobRetry(t, err)
		d := b.delivery(t, id, "billing")
		require.Equal(t, "stuck", d.Status)
		require.Equal(t, 2, d.Attempts)
		require.Nil(t, d.NextAttemptAt)
		require.Contains(t, *d.LastError, "status 500: down (attempt 2, the last)")
		m := b.message(t, id) // still there
		require.Equal(t, "stuck", m.Status)
		require.Contains(t, *m.LastError, "route billing: ")
	})

	t.Run("WorkerMaxAttemptsBelowJobs", func(t *testing.T) {
		t.Parallel()
		// The job allows more attempts than the worker: River would retry a
		// plain error, so the worker cancels.
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusInternalServerError, "")
		w := b.worker(t, DeliverConfig{Client: srv.Client(), MaxAttempts: 2}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		requireJobCancel(t, w.Work(ctx, deliverJob(id, "billing", 2, 24)))
		require.Equal(t, "stuck", b.delivery(t, id, "billing").Status)
		require.Equal(t, "stuck", b.message(t, id).Status)
	})

	t.Run("MessageGoneCancelled", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		srv := statusHook(t, http.StatusOK, "")
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")
		_, err := b.pool.Exec(ctx, "DELETE FROM ferry_outbox WHERE id = $1", id)
		require.NoError(t, err)

		err = w.Work(ctx, deliverJob(id, "billing", 1, 24))
		requireJobCancel(t, err)
		require.Contains(t, err.Error(), "message not found")
	})

	t.Run("MessageDeletedWhileDelivered", func(t *testing.T) {
		t.Parallel()
		// Retention deletes the message while its webhook is answered: the
		// record of the delivery finds it gone, and the job is cancelled
		// rather than retried.
		b := deliverSetup(t)
		var id int64
		srv := hookServer(t, func(w http.ResponseWriter, r *http.Request) {
			_, err := b.pool.Exec(r.Context(), "DELETE FROM ferry_outbox WHERE id = $1", id)
			if err != nil {
				w.WriteHeader(http.StatusInternalServerError)
			}
		})
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id = b.seed(t, testTopic, `{}`, "billing")

		err := w.Work(ctx, deliverJob(id, "billing", 1, 24))
		requireJobCancel(t, err)
		require.Contains(t, err.Error(), "message not found")
		var left int
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1", id).Scan(&left))
		require.Zero(t, left, "nothing of the message is written back")
	})

	t.Run("AlreadyDeliveredSkipped", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		var hits atomic.Int64
		srv := hookServer(t, func(http.ResponseWriter, *http.Request) { hits.Add(1) })
		w := b.worker(t, DeliverConfig{Client: srv.Client()}, hookRoute(srv, "billing"))
		id := b.seed(t, testTopic, `{}`, "billing")

		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		require.NoError(t, w.Work(ctx, deliverJob(id, "billing", 1, 24)))
		require.EqualValues(t, 1, hits.Load())
		require.Equal(t, 1, b.delivery(t, id, "billing").Attempts)
	})
}

// deliverClient is a River client working a queue of its own with one
// DeliverWorker, stopped when the test ends.
type deliverClient struct {
	client *river.Client[pgx.Tx]
	queue  string
	events <-chan *river.Event
}

var deliverQueueSeq atomic.Int64

func startDeliverClient(t *testing.T, pool *pgxpool.Pool, w *DeliverWorker) *deliverClient {
	t.Helper()
	queue := fmt.Sprintf("outbox_test_%d", deliverQueueSeq.Add(1))
	client := newRiverClient(t, pool, w, map[string]river.QueueConfig{queue: {MaxWorkers: 10}})
	events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled)
	t.Cleanup(cancel)
	startRiver(t, client)
	return &deliverClient{client: client, queue: queue, events: events}
}

// newRiverClient returns a River client (not started) that works queues
// with w, fetching every few milliseconds.
func newRiverClient(t *testing.T, pool *pgxpool.Pool, w *DeliverWorker, queues map[string]river.QueueConfig) *river.Client[pgx.Tx] {
	t.Helper()
	var reg jobs.Registry
	require.NoError(t, reg.Add(w.Kind()))
	workers, err := reg.Workers()
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 20 * time.Millisecond,
		Logger:            slog.New(slog.DiscardHandler),
		Queues:            queues,
		TestOnly:          true,
		Workers:           workers,
	})
	require.NoError(t, err)
	return client
}

// startRiver starts client and stops it when the test ends.
func startRiver(t *testing.T, client *river.Client[pgx.Tx]) {
	t.Helper()
	require.NoError(t, client.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
}

// insert inserts n jobs delivering message id to route.
func (c *deliverClient) insert(t *testing.T, id int64, route string, n int) []int64 {
	t.Helper()
	var params []river.InsertManyParams
	for range n {
		params = append(params, river.InsertManyParams{
			Args:       DeliverArgs{MessageID: id, Route: route},
			InsertOpts: &river.InsertOpts{Queue: c.queue, MaxAttempts: DefaultMaxAttempts},
		})
	}
	res, err := c.client.InsertMany(context.Background(), params)
	require.NoError(t, err)
	ids := make([]int64, len(res))
	for i, r := range res {
		ids[i] = r.Job.ID
	}
	return ids
}

// wait waits for an attempt of each job to end and returns the jobs as
// stored afterwards, with the kind of event each ended with.
func (c *deliverClient) wait(t *testing.T, jobIDs ...int64) ([]river.EventKind, []*rivertype.JobRow) {
	t.Helper()
	kinds := map[int64]river.EventKind{}
	timeout := time.After(10 * time.Second)
	for len(kinds) < len(jobIDs) {
		select {
		case ev := <-c.events:
			for _, id := range jobIDs {
				if ev.Job.ID == id {
					kinds[id] = ev.Kind
				}
			}
		case <-timeout:
			t.Fatalf("jobs %v: only %d of them finished an attempt within 10s", jobIDs, len(kinds))
		}
	}
	var (
		evs  []river.EventKind
		rows []*rivertype.JobRow
	)
	for _, id := range jobIDs {
		job, err := c.client.JobGet(context.Background(), id)
		require.NoError(t, err)
		evs, rows = append(evs, kinds[id]), append(rows, job)
	}
	return evs, rows
}

// effects is a receiver's table of effects, UNIQUE on the event id as a
// receiver would keep it; a handler writing to it twice would fail.
type effects struct {
	table string
	calls atomic.Int64
}

var effectsSeq atomic.Int64

func newEffects(t *testing.T, pool *pgxpool.Pool) *effects {
	t.Helper()
	e := &effects{table: fmt.Sprintf("outbox_test_effect_%d", effectsSeq.Add(1))}
	_, err := pool.Exec(context.Background(), "CREATE TABLE "+e.table+" (event_id text NOT NULL UNIQUE, topic text NOT NULL)")
	require.NoError(t, err)
	return e
}

// write is the handler's effect.
func (e *effects) write(ctx context.Context, tx pgx.Tx, msg Message) error {
	e.calls.Add(1)
	_, err := tx.Exec(ctx, "INSERT INTO "+e.table+" (event_id, topic) VALUES ($1, $2)", msg.EventID(), msg.Topic)
	return err
}

func (e *effects) count(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM "+e.table).Scan(&n))
	return n
}

func received(t *testing.T, pool *pgxpool.Pool, consumer string, id int64) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT count(*) FROM ferry_outbox_received WHERE consumer = $1 AND event_id = $2", consumer, fmt.Sprint(id)).Scan(&n))
	return n
}

// TestDeliverWorker_Handler runs Go handler routes through a real River
// client: the handler's effect, its receipt and the delivery are one
// transaction; River completes the job after it.
func TestDeliverWorker_Handler(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	handlerRoute := func(name string, h Handler) Route {
		return Route{Topic: testTopic, Name: name, Handler: h}
	}

	t.Run("EffectOnce", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		eff := newEffects(t, b.pool)
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", eff.write)))
		id := b.seed(t, testTopic, `{"order_id": 42}`, "ledger")

		evs, jobsAfter := c.wait(t, c.insert(t, id, "ledger", 1)...)
		require.Equal(t, river.EventKindJobCompleted, evs[0])
		require.Equal(t, rivertype.JobStateCompleted, jobsAfter[0].State)
		require.Empty(t, jobsAfter[0].Errors)
		require.Equal(t, 1, eff.count(t, b.pool))
		require.Equal(t, 1, received(t, b.pool, "ledger", id))
		d := b.delivery(t, id, "ledger")
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, "delivered", b.message(t, id).Status)

		// The effect, the receipt and the delivery committed together: the
		// rows carry the same transaction id. The job's completion is
		// River's, in a transaction of its own.
		var effXmin, deliveryXmin, receivedXmin, jobXmin string
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT xmin::text FROM "+eff.table).Scan(&effXmin))
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT xmin::text FROM ferry_outbox_delivery WHERE message_id = $1", id).Scan(&deliveryXmin))
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT xmin::text FROM ferry_outbox_received WHERE event_id = $1", fmt.Sprint(id)).Scan(&receivedXmin))
		require.NoError(t, b.pool.QueryRow(ctx, "SELECT xmin::text FROM river_job WHERE id = $1", jobsAfter[0].ID).Scan(&jobXmin))
		require.Equal(t, effXmin, deliveryXmin)
		require.Equal(t, effXmin, receivedXmin)
		require.NotEqual(t, effXmin, jobXmin)

		// A second job for the same delivery (a redelivery) changes
		// nothing.
		evs, _ = c.wait(t, c.insert(t, id, "ledger", 1)...)
		require.Equal(t, river.EventKindJobCompleted, evs[0])
		require.Equal(t, 1, eff.count(t, b.pool))
		require.EqualValues(t, 1, eff.calls.Load())
		require.Equal(t, 1, b.delivery(t, id, "ledger").Attempts)
	})

	t.Run("RunAgainAfterCommit", func(t *testing.T) {
		t.Parallel()
		// A job whose worker died after the handler's transaction
		// committed, before River completed the job, runs again (rescued):
		// it finds the delivery delivered and does nothing. Work is
		// called without River, as the rescued run of the same job.
		b := deliverSetup(t)
		eff := newEffects(t, b.pool)
		w := b.worker(t, DeliverConfig{}, handlerRoute("ledger", eff.write))
		id := b.seed(t, testTopic, `{}`, "ledger")
		job := deliverJob(id, "ledger", 1, 24)

		require.NoError(t, w.Work(ctx, job))
		require.Equal(t, 1, eff.count(t, b.pool))
		require.Equal(t, "delivered", b.delivery(t, id, "ledger").Status)
		require.Equal(t, "delivered", b.message(t, id).Status)

		job.Attempt = 2
		require.NoError(t, w.Work(ctx, job))
		require.Equal(t, 1, eff.count(t, b.pool))
		require.EqualValues(t, 1, eff.calls.Load())
		d := b.delivery(t, id, "ledger")
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 1, d.Attempts)
	})

	t.Run("ConcurrentDuplicateJobs", func(t *testing.T) {
		t.Parallel()
		// Two jobs for one delivery at once both find it pending; Receive's
		// primary key lets one handler run.
		b := deliverSetup(t)
		eff := newEffects(t, b.pool)
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", eff.write)))
		id := b.seed(t, testTopic, `{}`, "ledger")

		evs, _ := c.wait(t, c.insert(t, id, "ledger", 2)...)
		require.Equal(t, []river.EventKind{river.EventKindJobCompleted, river.EventKindJobCompleted}, evs)
		require.Equal(t, 1, eff.count(t, b.pool))
		require.EqualValues(t, 1, eff.calls.Load())
		require.Equal(t, "delivered", b.delivery(t, id, "ledger").Status)
	})

	t.Run("AlreadyReceivedNotHandledAgain", func(t *testing.T) {
		t.Parallel()
		// The receive row is there (an effect committed earlier): the
		// handler is not called, the delivery is recorded, the job done.
		b := deliverSetup(t)
		eff := newEffects(t, b.pool)
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", eff.write)))
		id := b.seed(t, testTopic, `{}`, "ledger")
		_, err := b.pool.Exec(ctx, "INSERT INTO ferry_outbox_received (consumer, event_id) VALUES ($1, $2)", "ledger", fmt.Sprint(id))
		require.NoError(t, err)

		evs, _ := c.wait(t, c.insert(t, id, "ledger", 1)...)
		require.Equal(t, river.EventKindJobCompleted, evs[0])
		require.Zero(t, eff.calls.Load())
		require.Equal(t, "delivered", b.delivery(t, id, "ledger").Status)
	})

	t.Run("FailsAfterEffectThenSucceeds", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		eff := newEffects(t, b.pool)
		h := func(ctx context.Context, tx pgx.Tx, msg Message) error {
			if err := eff.write(ctx, tx, msg); err != nil {
				return err
			}
			if eff.calls.Load() == 1 {
				return errors.New("downstream unavailable")
			}
			return nil
		}
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", h)))
		id := b.seed(t, testTopic, `{}`, "ledger")

		jobIDs := c.insert(t, id, "ledger", 1)
		evs, after := c.wait(t, jobIDs...)
		require.Equal(t, river.EventKindJobFailed, evs[0])
		require.NotEqual(t, rivertype.JobStateCompleted, after[0].State)
		require.Contains(t, after[0].Errors[0].Error, "handler: downstream unavailable")
		require.Zero(t, eff.count(t, b.pool), "the effect rolled back")
		require.Zero(t, received(t, b.pool, "ledger", id), "the receive row rolled back")
		d := b.delivery(t, id, "ledger")
		require.Equal(t, "pending", d.Status)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, "handler: downstream unavailable", *d.LastError)
		require.NotNil(t, d.NextAttemptAt)
		// Five seconds after the failure, by the worker's clock (not the
		// test's, which a loaded machine can leave seconds behind).
		require.WithinDuration(t, after[0].Errors[0].At.Add(5*time.Second), *d.NextAttemptAt, time.Second)
		require.WithinDuration(t, *d.NextAttemptAt, after[0].ScheduledAt, time.Microsecond, "River's retry time is next_attempt_at")

		_, err := c.client.JobRetry(ctx, jobIDs[0])
		require.NoError(t, err)
		evs, after = c.wait(t, jobIDs...)
		require.Equal(t, river.EventKindJobCompleted, evs[0])
		require.Equal(t, rivertype.JobStateCompleted, after[0].State)
		require.Equal(t, 1, eff.count(t, b.pool))
		d = b.delivery(t, id, "ledger")
		require.Equal(t, "delivered", d.Status)
		require.Equal(t, 2, d.Attempts)
		require.Nil(t, d.LastError)
		require.Equal(t, "delivered", b.message(t, id).Status)
	})

	t.Run("PanicRetried", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", func(context.Context, pgx.Tx, Message) error {
			panic("boom")
		})))
		id := b.seed(t, testTopic, `{}`, "ledger")

		evs, _ := c.wait(t, c.insert(t, id, "ledger", 1)...)
		require.Equal(t, river.EventKindJobFailed, evs[0])
		d := b.delivery(t, id, "ledger")
		require.Equal(t, "pending", d.Status)
		require.Equal(t, "handler: panicked: boom", *d.LastError)
	})

	t.Run("CancelStuck", func(t *testing.T) {
		t.Parallel()
		b := deliverSetup(t)
		c := startDeliverClient(t, b.pool, b.worker(t, DeliverConfig{}, handlerRoute("ledger", func(context.Context, pgx.Tx, Message) error {
			return river.JobCancel(errors.New("payload refused"))
		})))
		id := b.seed(t, testTopic, `{}`, "ledger")

		evs, after := c.wait(t, c.insert(t, id, "ledger", 1)...)
		require.Equal(t, river.EventKindJobCancelled, evs[0])
		require.Equal(t, rivertype.JobStateCancelled, after[0].State)
		d := b.delivery(t, id, "ledger")
		require.Equal(t, "stuck", d.Status)
		require.Equal(t, "handler: payload refused", *d.LastError)
		require.Equal(t, "stuck", b.message(t, id).Status)
	})
}

// statementTracer counts the statements and pipelines a pool sends: each
// is one round trip to Postgres once its statements are prepared.
type statementTracer struct{ n atomic.Int64 }

func (s *statementTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (*statementTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statementTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	s.n.Add(1)
	return ctx
}

func (*statementTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (*statementTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestDeliverWorker_HandlerReadsInItsTransaction: a Go handler's delivery
// reads its message in the handler's transaction, in Receive's round
// trip, so the handler starts after two round trips (BEGIN, then the read
// and Receive in one pipeline; three when the message was read first);
// a delivery that is not for the handler rolls back Receive's row.
func TestDeliverWorker_HandlerReadsInItsTransaction(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := deliverSetup(t)
	trace := &statementTracer{}
	pool := pgtest.TracedPoolFor(t, pgtest.URL(t), trace)

	var (
		before = int64(-1)
		got    Message
	)
	rs, err := NewRoutes(Route{Topic: testTopic, Name: "ledger", Handler: func(_ context.Context, _ pgx.Tx, msg Message) error {
		before, got = trace.n.Load(), msg
		return nil
	}})
	require.NoError(t, err)
	w := NewDeliverWorker(DeliverConfig{Pool: pool, Routes: rs, Logger: b.logs.Logger()})

	// A first delivery prepares the statements on the pool's connection.
	require.NoError(t, w.Work(ctx, deliverJob(b.seed(t, testTopic, `{}`, "ledger"), "ledger", 1, 24)))

	id := b.seed(t, testTopic, `{"order_id": 7}`, "ledger")
	trace.n.Store(0)
	require.NoError(t, w.Work(ctx, deliverJob(id, "ledger", 1, 24)))
	require.EqualValues(t, 2, before, "round trips before the handler started")
	require.Equal(t, id, got.ID)
	require.Equal(t, testTopic, got.Topic)
	require.JSONEq(t, `{"order_id": 7}`, string(got.Payload))
	require.Equal(t, "delivered", b.delivery(t, id, "ledger").Status)
	require.Equal(t, 1, received(t, b.pool, "ledger", id))

	// The message gone: cancelled, and Receive's row rolled back.
	gone := b.seed(t, testTopic, `{}`, "ledger")
	_, err = b.pool.Exec(ctx, "DELETE FROM ferry_outbox WHERE id = $1", gone)
	require.NoError(t, err)
	err = w.Work(ctx, deliverJob(gone, "ledger", 1, 24))
	requireJobCancel(t, err)
	require.Contains(t, err.Error(), "message not found")
	require.Zero(t, received(t, b.pool, "ledger", gone))

	// No delivery row for the route: cancelled, nothing received.
	stray := b.seed(t, testTopic, `{}`)
	requireJobCancel(t, w.Work(ctx, deliverJob(stray, "ledger", 1, 24)))
	require.Zero(t, received(t, b.pool, "ledger", stray))
}
