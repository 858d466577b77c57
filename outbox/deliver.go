package outbox

import (
	"bytes"
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/jobs"
)

// DeliverArgs are the args of outbox.deliver: one message to one route. The
// relay inserts one such job per (message, route), in the transaction that
// also records the delivery in ferry_outbox_delivery.
type DeliverArgs struct {
	MessageID int64  `json:"message_id"`
	Route     string `json:"route"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "outbox.deliver" }

// Request headers of a webhook delivery.
const (
	// EventIDHeader carries the message id, in decimal: what receivers
	// dedup on.
	EventIDHeader = "Ferry-Event-Id"
	// TopicHeader carries the message's topic.
	TopicHeader = "Ferry-Topic"
	// RouteHeader carries the route's name.
	RouteHeader = "Ferry-Route"
	// SignatureHeader carries ferry's own signature, "t=<unix
	// seconds>,v1=<hex HMAC-SHA256>" (see Sign), beside the Standard
	// Webhooks headers (WebhookSignatureHeader). It is absent when the
	// route has no secret.
	SignatureHeader = "Ferry-Signature"
)

// ErrRouteNotConfigured is what a worker says of a delivery whose route it
// does not know, found in the route's own queue (a worker works the queues
// of its own routes only, so this takes a misconfiguration, such as a River
// client of one's own working a route's queue): the delivery waits for a
// worker that has the route, with last_error "waiting for a route: route
// not configured on this worker", and is never stuck for it.
var ErrRouteNotConfigured = errors.New("route not configured on this worker")

// routeSnooze is how long a delivery found on a worker without its route
// waits before it is tried again.
const routeSnooze = time.Minute

// retryBackoff is the delay after the failed attempt n (1-based) at index
// n-1; later attempts wait as long as the last entry.
var retryBackoff = []time.Duration{
	5 * time.Second,
	15 * time.Second,
	time.Minute,
	5 * time.Minute,
	15 * time.Minute,
	time.Hour,
}

const (
	// jobTimeoutMargin is how much longer than the route's own timeout River
	// gives a job, so the route's timeout (a retried attempt) wins the race.
	jobTimeoutMargin = 5 * time.Second
	// unknownRouteJobTimeout is the job timeout of a route this worker does
	// not know; such a job ends at once anyway.
	unknownRouteJobTimeout = 15 * time.Second
	// recordTimeout bounds the writes that record an attempt, which run
	// even when the job's context has ended.
	recordTimeout = 10 * time.Second
	// maxLastError bounds last_error (a handler's error can be anything).
	maxLastError = 2048
	// scrubWindow is how much more of a response body than SnippetBytes is
	// read, so a secret that straddles the snippet's end is still scrubbed
	// whole before the cut.
	scrubWindow = 4 << 10
)

// DeliverConfig configures a DeliverWorker.
type DeliverConfig struct {
	// Pool is the database of ferry_outbox. Required.
	Pool *pgxpool.Pool
	// Routes is this process's routing table; nil is no route (every
	// delivery is then forwarded to its route's queue, or waits there).
	Routes *Routes
	// MaxAttempts after which a failing delivery is stuck; default
	// DefaultMaxAttempts (FERRY_OUTBOX_MAX_ATTEMPTS). A job inserted with a
	// lower River MaxAttempts stops at that.
	MaxAttempts int
	// Client sends webhooks; default a client of this worker's own. It is
	// used without following redirects whatever its CheckRedirect says.
	Client *http.Client
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Now is the clock of signature timestamps and next attempt times;
	// default time.Now.
	Now func() time.Time
	// Advance takes the turn of an ordered chain (WithOrderingKey) once
	// the delivery that held it is recorded delivered: the process's
	// Relay.Advance, which starts many chains' next deliveries in one
	// transaction. Default nil: the transaction that records the delivery
	// starts the next one itself, by the River client of the job's
	// context (one insert notification per delivery, which serialises
	// commits under load).
	Advance func(Turn)
	// ChainBudget is how long a delivery job of an ordered chain, its own
	// message delivered, goes on delivering the chain's next messages
	// itself (see the package doc, "Ordered delivery"). Default
	// DefaultChainBudget; negative: never, each message of a chain gets a
	// job of its own when its turn comes (what a limit on delivery jobs
	// needs, which counts jobs: ferry's worker sets it so under one).
	ChainBudget time.Duration
	// Tracer makes a client span for each webhook request, a child of the
	// job's span (a child of the message's writer, through the relay),
	// whose W3C context the request carries in its traceparent header.
	// Default: none recorded, though the job's trace context still goes
	// out in traceparent.
	Tracer Tracer
}

// DeliverWorker works outbox.deliver: it posts a message to a webhook or
// runs a Go handler, and records each attempt in ferry_outbox_delivery
// (and, once every route of the message is done or one is stuck, in
// ferry_outbox).
//
// Outcomes: delivered (2xx, or the handler's transaction committed); failed
// and retried on the backoff table 5, 15, 60, 300, 900, 3600 s with ±10%
// jitter (408, 429, 5xx, transport errors, timeouts, a handler's error or
// panic); stuck at once (any other status, a handler returning
// river.JobCancel) or after MaxAttempts. A stuck delivery ends its job and
// marks the message stuck; Reset puts it back.
//
// A delivery found in the shared queue Queue, or in another queue than its
// route's while this worker lacks the route, is forwarded to its route's
// queue (QueueFor); one found in its route's queue on a worker without the
// route (a misconfiguration) is snoozed, waiting for a worker that has it.
// Neither is an attempt, and neither is ever stuck.
//
// A Go handler route runs its handler in the transaction that records the
// receipt (Receive) and the delivery delivered; River's completer
// completes the job after it, in its batches. A job run again after that
// commit (its worker killed before River completed it) finds the delivery
// delivered and does nothing: the effect is once either way. Completing
// the job in the handler's transaction too (river.JobCompleteTx, one
// statement of River's per delivery, where the completer does a batch in
// one) took a third of the database's time at 500 deliveries a second
// (pg_stat_statements: 3.3 of 10 s), and kept the handler's transaction
// open for it.
type DeliverWorker struct {
	river.WorkerDefaults[DeliverArgs]

	pool        *pgxpool.Pool
	routes      *Routes
	maxAttempts int
	client      *http.Client
	log         *slog.Logger
	now         func() time.Time

	// retryAt holds, from Work to NextRetry, the next attempt time Work
	// recorded in next_attempt_at, so River schedules the retry at exactly
	// that time (the jitter is random). Keyed by retryKey; NextRetry
	// removes the entry.
	retryAt sync.Map
	tracer  Tracer
	advance func(Turn)
	chain   time.Duration
}

type retryKey struct {
	jobID   int64
	attempt int
}

var _ river.Worker[DeliverArgs] = (*DeliverWorker)(nil)

// NewDeliverWorker returns a worker; a nil Pool panics (a wiring mistake,
// not an input). It warns once per webhook route that has no secret: its
// requests go unsigned.
func NewDeliverWorker(cfg DeliverConfig) *DeliverWorker {
	if cfg.Pool == nil {
		panic("outbox: NewDeliverWorker: DeliverConfig.Pool is nil")
	}
	w := &DeliverWorker{
		pool:        cfg.Pool,
		routes:      cfg.Routes,
		maxAttempts: cmp.Or(max(cfg.MaxAttempts, 0), DefaultMaxAttempts),
		client:      noRedirects(cfg.Client),
		log:         cfg.Logger,
		now:         cfg.Now,
		tracer:      cfg.Tracer,
		advance:     cfg.Advance,
		chain:       max(cmp.Or(cfg.ChainBudget, DefaultChainBudget), 0),
	}
	if w.routes == nil {
		w.routes = &Routes{}
	}
	if w.log == nil {
		w.log = slog.Default()
	}
	if w.now == nil {
		w.now = time.Now
	}
	for _, r := range w.routes.All() {
		if r.URL != "" && len(r.Secrets) == 0 {
			w.log.Warn("outbox: route has no secret; its requests are not signed", "route", r.Name, "topic", r.Topic)
		}
	}
	return w
}

// noRedirects returns a copy of c (or of a new dedicated client) that never
// follows redirects. A webhook URL is configuration: a redirect means the
// configuration is out of date, and following it would send the signed
// payload to a URL nobody configured (307/308 resend the body) or drop it
// (301/302/303 turn the POST into a GET). The 3xx answer is returned as is
// and the delivery is stuck until the route's URL is fixed.
func noRedirects(c *http.Client) *http.Client {
	var cp http.Client
	if c != nil {
		cp = *c
	} else {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		cp.Transport = tr
	}
	cp.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &cp
}

// Kind describes outbox.deliver for the job registry.
func (w *DeliverWorker) Kind() jobs.Kind {
	return jobs.Define[DeliverArgs](w, Queue, "delivers one outbox message to one route")
}

// Timeout gives River's job context a little more than the route's own
// timeout, so the route's timeout (a retried attempt, recorded) wins.
func (w *DeliverWorker) Timeout(job *river.Job[DeliverArgs]) time.Duration {
	r, ok := w.routes.Get(job.Args.Route)
	if !ok {
		return unknownRouteJobTimeout
	}
	// An ordered delivery's job may go on to the next links of its chain
	// for its chain budget: each link starts within it, with its route's
	// timeout and the margin still ahead.
	return routeTimeout(r) + jobTimeoutMargin + w.chain
}

// NextRetry returns when River retries a failed attempt: the time Work
// recorded as next_attempt_at, or, for a failure Work did not record (the
// database was unreachable), a fresh draw from the backoff table.
func (w *DeliverWorker) NextRetry(job *river.Job[DeliverArgs]) time.Time {
	if at, ok := w.retryAt.LoadAndDelete(retryKey{job.ID, job.Attempt}); ok {
		return at.(time.Time)
	}
	return w.now().Add(backoff(job.Attempt))
}

// backoff is the delay after failed attempt n: the table's value ±10%.
func backoff(attempt int) time.Duration {
	d := retryBackoff[min(max(attempt, 1), len(retryBackoff))-1]
	return d + time.Duration((rand.Float64()*0.2-0.1)*float64(d))
}

func routeTimeout(r Route) time.Duration { return cmp.Or(r.Timeout, DefaultRouteTimeout) }

// outcome is what one attempt came to.
type outcome int

const (
	delivered   outcome = iota
	retry               // failed; River retries it
	stuck               // failed for good
	interrupted         // cut off by the job's context (shutdown); not recorded
)

// attempt is one attempt's result. err is safe to store and log: redacted
// and bounded.
type attempt struct {
	outcome outcome
	status  int // HTTP status; 0 for a Go handler or a transport error
	err     error
	// retryAfter is the wait the receiver asked for (Retry-After on a
	// 429 or 503); 0 leaves the next attempt to the backoff table.
	retryAfter time.Duration
}

// Work implements river.Worker.
func (w *DeliverWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	a := job.Args
	route, ok := w.routes.Get(a.Route)
	var read *loaded
	if ok && route.Handler != nil && job.Queue != Queue {
		// A Go handler's delivery in its route's queue, the common case:
		// the handler's transaction reads the message (workHandler with an
		// unread link), a round trip fewer before the handler starts. It
		// comes back only for what the switch below answers without a
		// handler: no message, no delivery row, or the delivery delivered.
		var err error
		if read, err = w.workHandler(ctx, job, route, link{msg: Message{ID: a.MessageID}, attempt: job.Attempt, unread: true}); read == nil {
			return err
		}
	} else {
		read = w.load(ctx, a)
	}
	msg, deliveryStatus, err := read.msg, read.status, read.err
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		err := fmt.Errorf("outbox: deliver message %d to route %s: message not found (deleted by retention?)", a.MessageID, a.Route)
		w.log.Warn("outbox: delivery cancelled", "message_id", a.MessageID, "route", a.Route, "error", err)
		return river.JobCancel(err)
	case err != nil:
		return fmt.Errorf("outbox: deliver message %d to route %s: load message: %w", a.MessageID, a.Route, err)
	case deliveryStatus == nil:
		err := fmt.Errorf("outbox: deliver message %d to route %s: no delivery row in ferry_outbox_delivery (the relay records one with each job)", a.MessageID, a.Route)
		w.log.Error("outbox: delivery stuck", "message_id", a.MessageID, "route", a.Route, "topic", msg.Topic, "error", err)
		return river.JobCancel(err)
	case *deliveryStatus == "delivered":
		// A job of an ordered chain run again after it delivered its own
		// message (snoozed for a later link's retry, interrupted, its
		// worker killed): it goes on with the link it claimed. Otherwise a
		// second job for a delivery already done (a reset raced a success,
		// a job inserted by hand): nothing to do.
		w.log.Debug("outbox: already delivered", "message_id", a.MessageID, "route", a.Route, "topic", msg.Topic, "attempt", job.Attempt)
		return w.resume(ctx, job, msg)
	}

	switch {
	case job.Queue == Queue || (!ok && job.Queue != QueueFor(a.Route)):
		return w.forward(ctx, job, msg)
	case !ok:
		return w.waitForRoute(ctx, job, msg)
	}
	return w.deliver(ctx, job, route, link{msg: msg, attempt: job.Attempt})
}

// deliver delivers l, the job's own message or a link it claimed, to
// route: by its Go handler, or by webhook.
func (w *DeliverWorker) deliver(ctx context.Context, job *river.Job[DeliverArgs], route Route, l link) error {
	if route.Handler != nil {
		_, err := w.workHandler(ctx, job, route, l)
		return err
	}
	return w.webhook(ctx, job, route, l)
}

// webhook posts l's message to route and records the attempt; while the
// job's chain budget lasts, a delivered message of an ordered chain is
// followed by the chain's next, claimed by this job in the transaction
// that records it delivered (claimNext), and so on.
func (w *DeliverWorker) webhook(ctx context.Context, job *river.Job[DeliverArgs], route Route, l link) error {
	until := time.Now().Add(w.chain)
	for {
		start := time.Now()
		res := w.post(w.within(ctx, l), route, l.msg)
		next, err := w.finish(ctx, job, l, res, time.Since(start), w.chains(ctx, route, until))
		if err != nil || next == nil {
			return err
		}
		l = *next
	}
}

// within returns the context of l's request: ctx, or for a claimed link
// ctx in its own message's trace (Tracer.Within; without a Tracer, the
// trace context its traceparent header carries).
func (w *DeliverWorker) within(ctx context.Context, l link) context.Context {
	switch {
	case !l.claimed:
		return ctx
	case w.tracer != nil:
		return w.tracer.Within(ctx, l.parent, l.state)
	}
	return traceparent.Within(ctx, l.parent, l.state)
}

// chains says whether a job whose chain budget runs until until claims
// the next link of its chain: within the budget, and while nothing stops
// the job, with the route's timeout and margin left before the job's
// deadline.
func (w *DeliverWorker) chains(ctx context.Context, route Route, until time.Time) bool {
	if d, ok := ctx.Deadline(); ok && time.Until(d) < routeTimeout(route)+jobTimeoutMargin {
		return false
	}
	return ctx.Err() == nil && time.Now().Before(until)
}

// resume goes on with the chain of a job whose own message is delivered:
// the link it claimed before it was snoozed or cut off, or a link whose
// turn came without a job. It returns nil when there is none.
func (w *DeliverWorker) resume(ctx context.Context, job *river.Job[DeliverArgs], msg Message) error {
	if msg.OrderingKey == "" {
		return nil
	}
	a := job.Args
	next, err := claimNext(ctx, w.pool, job.ID, a.Route, msg)
	if err != nil {
		return fmt.Errorf("outbox: deliver message %d to route %s: resume its chain: %w", a.MessageID, a.Route, err)
	}
	if next == nil {
		return nil
	}
	route, ok := w.routes.Get(a.Route)
	if !ok {
		return w.waitForRoute(ctx, job, next.msg)
	}
	return w.deliver(ctx, job, route, *next)
}

// forward moves a delivery to its route's queue (QueueFor), where only
// workers that have the route fetch it: in one transaction, a new
// outbox.deliver job there, recorded as the delivery's job, and this job
// completed. No attempt is made or counted. It is how deliveries relayed
// into the shared queue Queue (by a version of ferry before routes had
// queues, by hand) reach a worker with their route.
func (w *DeliverWorker) forward(ctx context.Context, job *river.Job[DeliverArgs], msg Message) error {
	a := job.Args
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return fmt.Errorf("outbox: forward message %d to route %s's queue: %w", a.MessageID, a.Route, err)
	}
	queue := QueueFor(a.Route)
	var newID int64
	err = pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
		res, err := client.InsertTx(ctx, tx, a, &river.InsertOpts{Queue: queue, MaxAttempts: cmp.Or(job.MaxAttempts, w.maxAttempts), Priority: priorityDelivery})
		if err != nil {
			return fmt.Errorf("insert the job: %w", err)
		}
		newID = res.Job.ID
		if _, err := tx.Exec(ctx, `UPDATE ferry_outbox_delivery SET job_id = $3, updated_at = now()
			WHERE message_id = $1 AND route = $2 AND status <> 'delivered'`, a.MessageID, a.Route, newID); err != nil {
			return fmt.Errorf("record the job: %w", err)
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete this job: %w", err)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("outbox: forward message %d to route %s's queue %s: %w", a.MessageID, a.Route, queue, err)
	}
	w.log.Info("outbox: delivery forwarded to its route's queue", "message_id", a.MessageID, "route", a.Route, "topic", msg.Topic, "queue", queue, "job_id", newID)
	return nil
}

// waitForRoute snoozes a delivery found in its route's queue on a worker
// without the route, and says so in its last_error: it is never stuck for
// what another worker can do.
func (w *DeliverWorker) waitForRoute(ctx context.Context, job *river.Job[DeliverArgs], msg Message) error {
	a := job.Args
	lastErr := ErrWaitingForRoute.Error() + ": " + ErrRouteNotConfigured.Error()
	if _, err := w.pool.Exec(ctx, `UPDATE ferry_outbox_delivery SET last_error = $3, updated_at = now()
		WHERE message_id = $1 AND route = $2 AND status = 'pending'`, a.MessageID, a.Route, lastErr); err != nil {
		return fmt.Errorf("outbox: deliver message %d to route %s: record the wait: %w", a.MessageID, a.Route, err)
	}
	w.log.Warn("outbox: delivery waits for a worker with its route", "message_id", a.MessageID, "route", a.Route, "topic", msg.Topic, "queue", job.Queue, "retry_in", routeSnooze)
	return river.JobSnooze(routeSnooze)
}

// load reads the message and the status of its delivery to the job's route
// (nil when there is no delivery row); a missing message is err pgx.ErrNoRows.
func (w *DeliverWorker) load(ctx context.Context, a DeliverArgs) *loaded {
	r := scanLoad(w.pool.QueryRow(ctx, sqlLoad, a.MessageID, a.Route), a.MessageID)
	return &r
}

// scanLoad reads row, sqlLoad's for message id.
func scanLoad(row pgx.Row, id int64) loaded {
	r := loaded{msg: Message{ID: id}}
	var payload []byte
	r.err = row.Scan(&r.msg.Topic, &payload, &r.msg.DedupKey, &r.msg.CreatedAt, &r.msg.OrderingKey, &r.status)
	r.msg.Payload = payload
	return r
}

// loaded is what load reads, as a handler's transaction reads it (see
// workHandler), for Work to answer when it is not for the handler.
type loaded struct {
	msg    Message
	status *string
	err    error
}

// errNotForHandler rolls back a handler's transaction that read a
// delivery not for its handler (workHandler).
var errNotForHandler = errors.New("outbox: the delivery is not for the handler")

// loadAndReceive is load and Receive in one round trip (a pipeline), in
// tx: r is the read of message id and its delivery to route (r.err
// pgx.ErrNoRows when the message is gone); first and err are Receive's.
// Receive runs whatever the read finds: the caller rolls tx back when the
// delivery is not for the handler.
func loadAndReceive(ctx context.Context, tx pgx.Tx, route string, id int64) (r loaded, first bool, err error) {
	b := &pgx.Batch{}
	b.Queue(sqlLoad, id, route)
	b.Queue(sqlReceive, route, Message{ID: id}.EventID())
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); r.err == nil && err == nil && cerr != nil {
			err = fmt.Errorf("outbox: receive %d for %s: %w", id, route, cerr)
		}
	}()
	r = scanLoad(br.QueryRow(), id)
	if r.err != nil && !errors.Is(r.err, pgx.ErrNoRows) {
		return r, false, nil
	}
	tag, err := br.Exec()
	if err != nil {
		return r, false, fmt.Errorf("outbox: receive %d for %s: %w", id, route, err)
	}
	return r, tag.RowsAffected() == 1, nil
}

// post sends msg to the webhook route once.
func (w *DeliverWorker) post(ctx context.Context, route Route, msg Message) attempt {
	timeout := routeTimeout(route)
	shown := redact.URL(route.URL)
	target := "POST " + shown
	if w.tracer == nil {
		return w.send(ctx, ctx, route, msg, target, timeout)
	}
	sctx, end := w.tracer.Request(ctx, route.Name, shown, msg.ID)
	res := w.send(ctx, sctx, route, msg, target, timeout)
	var err error
	if res.outcome != delivered {
		err = res.err
	}
	end(res.status, err)
	return res
}

// send is post's request: ctx is the job's context, spanCtx its span's (a
// child of ctx), which the request is made in and carries.
func (w *DeliverWorker) send(ctx, spanCtx context.Context, route Route, msg Message, target string, timeout time.Duration) attempt {
	timedOut := fmt.Errorf("%s: timed out after %s", target, timeout)
	rctx, cancel := context.WithTimeoutCause(spanCtx, timeout, timedOut)
	defer cancel()

	req, err := http.NewRequestWithContext(rctx, http.MethodPost, route.URL, bytes.NewReader(msg.Payload))
	if err != nil {
		// Not err itself: url.Parse errors quote the whole URL.
		return attempt{outcome: stuck, err: fmt.Errorf("%s: cannot build the request (invalid url?)", target)}
	}
	for k, v := range route.Headers {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "ferry-outbox")
	id, at := msg.EventID(), w.now()
	req.Header.Set(EventIDHeader, id)
	req.Header.Set(TopicHeader, msg.Topic)
	req.Header.Set(RouteHeader, route.Name)
	traceparent.InjectHeader(rctx, req.Header)
	req.Header.Set(WebhookIDHeader, id)
	req.Header.Set(WebhookTimestampHeader, strconv.FormatInt(at.Unix(), 10))
	var sigs []string
	if len(route.Secrets) > 0 {
		std, ferry := SignStandard(route.Secrets, id, at, msg.Payload), signFerry(route.Secrets, at, id, msg.Payload)
		req.Header.Set(WebhookSignatureHeader, std)
		req.Header.Set(SignatureHeader, ferry)
		sigs = []string{std, ferry}
	}

	resp, err := w.client.Do(req)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			// The job's context, not the route's timeout: River is
			// stopping (it puts the job back without counting the
			// attempt when the error is context.Canceled).
			return attempt{outcome: interrupted, err: fmt.Errorf("%s: interrupted: %w", target, ctx.Err())}
		case context.Cause(rctx) == timedOut:
			return attempt{outcome: retry, err: timedOut}
		default:
			return attempt{outcome: retry, err: fmt.Errorf("%s: %w", target, redact.URLError(err))}
		}
	}
	defer resp.Body.Close()
	snippet := readSnippet(resp.Body, scrubber(route, sigs))
	// Drain a bounded amount more so the connection can be reused.
	_, _ = io.CopyN(io.Discard, resp.Body, 64<<10)

	code := resp.StatusCode
	var statusErr error
	if snippet != "" {
		statusErr = fmt.Errorf("%s: status %d: %s", target, code, snippet)
	} else {
		statusErr = fmt.Errorf("%s: status %d", target, code)
	}
	switch {
	case code >= 200 && code < 300:
		return attempt{outcome: delivered, status: code}
	case code == http.StatusTooManyRequests || code == http.StatusServiceUnavailable:
		// The receiver may say when to come back; the next attempt is
		// then, rather than the backoff's.
		wait, ok := retryAfter(resp.Header.Get("Retry-After"), w.now())
		if ok {
			statusErr = fmt.Errorf("%w (Retry-After %s)", statusErr, wait)
		}
		return attempt{outcome: retry, status: code, err: statusErr, retryAfter: wait}
	case code == http.StatusRequestTimeout || code >= 500:
		return attempt{outcome: retry, status: code, err: statusErr}
	case code >= 300 && code < 400:
		loc := ""
		if l := resp.Header.Get("Location"); l != "" {
			loc = " to " + redact.URL(l)
		}
		return attempt{outcome: stuck, status: code, err: fmt.Errorf("%s: status %d: redirect%s not followed; fix the route's url", target, code, loc)}
	case code == http.StatusGone:
		// The receiver says the endpoint is gone for good: no attempt
		// can succeed until the route changes.
		return attempt{outcome: stuck, status: code, err: fmt.Errorf("%w; 410 Gone: the receiver has retired this endpoint, fix or remove the route, then enqueue outbox reset", statusErr)}
	default:
		return attempt{outcome: stuck, status: code, err: statusErr}
	}
}

// maxRetryAfter bounds the wait a receiver's Retry-After can ask for; a
// longer one is cut to it.
const maxRetryAfter = 24 * time.Hour

// retryAfter parses a Retry-After value, delay-seconds or an HTTP date,
// into the wait from now: at least a second (a 0 or a past date would
// retry at once, again and again), at most maxRetryAfter. ok is false when
// v is empty or neither form.
func retryAfter(v string, now time.Time) (wait time.Duration, ok bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		wait = time.Duration(min(n, int64(maxRetryAfter/time.Second))) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		wait = t.Sub(now).Round(time.Second)
	} else {
		return 0, false
	}
	return min(max(wait, time.Second), maxRetryAfter), true
}

// workHandler runs a Go handler route: in one transaction, Receive, the
// handler (when Receive says first) and the delivery recorded delivered
// (River completes the job after it). A failure rolls all of it back,
// then the failed attempt is recorded on its own.
//
// When l is unread (only its message's id is known), the transaction
// reads the message and its delivery's status (sqlLoad) in the round trip
// of Receive, a pipeline: the handler starts after two round trips
// (BEGIN, then both), not three. When the read finds no message, no
// delivery row, or the delivery delivered, nothing is for the handler:
// the transaction rolls back (with Receive's row) and workHandler
// returns what it read, for Work to answer.
func (w *DeliverWorker) workHandler(ctx context.Context, job *river.Job[DeliverArgs], route Route, l link) (*loaded, error) {
	timeout := routeTimeout(route)
	timedOut := fmt.Errorf("handler timed out after %s", timeout)
	hctx, cancel := context.WithTimeoutCause(w.within(ctx, l), timeout, timedOut)
	defer cancel()

	start := time.Now()
	var (
		handlerErr error
		back       *loaded
	)
	err := pgx.BeginFunc(hctx, w.pool, func(tx pgx.Tx) error {
		var (
			first bool
			err   error
		)
		if l.unread {
			var r loaded
			r, first, err = loadAndReceive(hctx, tx, route.Name, l.msg.ID)
			switch {
			case errors.Is(r.err, pgx.ErrNoRows) || (r.err == nil && (r.status == nil || *r.status == "delivered")):
				back = &r
				return errNotForHandler
			case r.err != nil:
				return r.err
			}
			l.msg, l.unread = r.msg, false
		} else {
			first, err = Receive(hctx, tx, route.Name, l.msg.EventID())
		}
		if err != nil {
			return err
		}
		msg := l.msg
		if first {
			if err := callHandler(hctx, route.Handler, tx, msg); err != nil {
				handlerErr = err
				return err
			}
		}
		return w.markDelivered(hctx, tx, msg, route.Name)
	})
	elapsed := time.Since(start)
	switch {
	case back != nil:
		return back, nil
	case l.unread:
		// The message was never read (BEGIN or the read failed): as when
		// load fails, no attempt was made.
		return nil, fmt.Errorf("outbox: deliver message %d to route %s: load message: %w", l.msg.ID, route.Name, err)
	}
	msg := l.msg

	var (
		res       attempt
		cancelErr *rivertype.JobCancelError
	)
	switch {
	case err == nil:
		res = attempt{outcome: delivered}
	case errors.Is(err, errMessageGone):
		res = attempt{outcome: stuck, err: err}
	case ctx.Err() != nil:
		res = attempt{outcome: interrupted, err: fmt.Errorf("handler: interrupted: %w", ctx.Err())}
	case context.Cause(hctx) == timedOut:
		res = attempt{outcome: retry, err: timedOut}
	case handlerErr != nil && errors.As(handlerErr, &cancelErr):
		// The handler says retrying cannot help (a payload it will never
		// accept): stuck at once.
		res = attempt{outcome: stuck, err: fmt.Errorf("handler: %w", cmp.Or(cancelErr.Unwrap(), error(cancelErr)))}
	case handlerErr != nil:
		res = attempt{outcome: retry, err: fmt.Errorf("handler: %w", handlerErr)}
	default:
		res = attempt{outcome: retry, err: err}
	}
	if res.outcome == delivered {
		// Recorded in the transaction; only the log line is left.
		w.handOn(msg, route.Name)
		w.logDelivered(job, l, res, elapsed)
		return nil, nil
	}
	_, err = w.finish(ctx, job, l, res, elapsed, false)
	return nil, err
}

// callHandler runs h, turning a panic into an error: a job never panics the
// process.
func callHandler(ctx context.Context, h Handler, tx pgx.Tx, msg Message) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panicked: %v", p)
		}
	}()
	return h(ctx, tx, msg)
}

// finish records an attempt at l (a webhook's, or a handler's failed
// one), logs it and returns what River should do with the job. When chain
// is true and l's message has an ordering key, the transaction that
// records it delivered claims the chain's next link for the job
// (claimNext), which it returns for the job to deliver next.
//
// A link the job claimed (not its own message) that fails is not the
// job's failure, whose own message is delivered: the job is snoozed until
// the link's next attempt (a snooze costs River no attempt; the link's
// attempts are counted in its delivery), and a link stuck ends the job
// completed.
func (w *DeliverWorker) finish(ctx context.Context, job *river.Job[DeliverArgs], l link, res attempt, elapsed time.Duration, chain bool) (*link, error) {
	a, msg := job.Args, l.msg
	own := !l.claimed
	attrs := []any{"message_id", msg.ID, "route", a.Route, "topic", msg.Topic, "attempt", l.attempt}
	if !own {
		attrs = append(attrs, "job_message_id", a.MessageID)
	}
	if res.status != 0 {
		attrs = append(attrs, "status_code", res.status)
	}
	attrs = append(attrs, "duration", elapsed)
	wrap := func(err error) error {
		return fmt.Errorf("outbox: deliver message %d to route %s: %w", msg.ID, a.Route, err)
	}

	// The job's context may be over (a timeout, a stop): the result must be
	// recorded anyway.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), recordTimeout)
	defer cancel()

	switch res.outcome {
	case delivered:
		chain = chain && msg.OrderingKey != ""
		var (
			next *link
			err  error
		)
		switch {
		case chain:
			next, err = deliveredThenNext(rctx, w.pool, job.ID, a.Route, msg)
		case msg.OrderingKey == "" || w.advance != nil:
			err = recordDelivered(rctx, w.pool, msg.ID, a.Route)
		default: // the next link's job is inserted in the same transaction
			err = pgx.BeginFunc(rctx, w.pool, func(tx pgx.Tx) error { return w.markDelivered(rctx, tx, msg, a.Route) })
		}
		if err != nil {
			if errors.Is(err, errMessageGone) {
				if !own {
					w.log.Warn("outbox: delivery cancelled", append(attrs, "error", err)...)
					return nil, nil
				}
				return nil, river.JobCancel(wrap(err))
			}
			// Retried: the receiver gets it again and dedups on the
			// event id.
			err = wrap(fmt.Errorf("delivered, but recording it failed: %w", err))
			w.log.Warn("outbox: delivery failed", append(attrs, "error", err)...)
			return nil, err
		}
		if !chain {
			w.handOn(msg, a.Route)
		}
		w.logDelivered(job, l, res, elapsed)
		return next, nil

	case interrupted:
		w.log.Warn("outbox: delivery interrupted", append(attrs, "error", res.err)...)
		return nil, wrap(res.err)

	case retry:
		lastErr := truncate(res.err.Error(), maxLastError)
		riverLimit := own && job.MaxAttempts > 0 && job.Attempt >= job.MaxAttempts
		if !riverLimit && l.attempt < w.maxAttempts {
			next := w.now().Add(cmp.Or(res.retryAfter, backoff(l.attempt)))
			err := wrap(res.err)
			var keyedJob int64
			if own {
				w.retryAt.Store(retryKey{job.ID, job.Attempt}, next)
				if msg.OrderingKey != "" {
					keyedJob = job.ID
				}
			}
			rerr := recordFailed(rctx, w.pool, msg.ID, a.Route, lastErr, next, keyedJob)
			w.log.Warn("outbox: delivery failed", append(attrs, "error", lastErr, "next_attempt_at", next)...)
			if rerr != nil {
				return nil, errors.Join(err, wrap(rerr))
			}
			if !own {
				return nil, river.JobSnooze(max(next.Sub(w.now()), 0))
			}
			return nil, err
		}
		lastErr = truncate(fmt.Sprintf("%s (attempt %d, the last)", res.err, l.attempt), maxLastError)
		err := wrap(fmt.Errorf("%w (attempt %d, the last)", res.err, l.attempt))
		rerr := recordStuck(rctx, w.pool, msg.ID, a.Route, lastErr)
		if rerr != nil {
			err = errors.Join(err, wrap(rerr))
		}
		w.log.Error("outbox: delivery stuck", append(attrs, "error", lastErr)...)
		switch {
		case !own && rerr != nil:
			// Not recorded: the job is retried, and resumes with it.
			return nil, err
		case !own:
			return nil, nil // the job's own message was delivered
		case riverLimit:
			return nil, err // River discards the job: it was its last attempt.
		}
		// MaxAttempts of this worker is below the job's own: River would
		// retry a plain error, so cancel.
		return nil, river.JobCancel(err)

	default: // stuck
		lastErr := truncate(res.err.Error(), maxLastError)
		err := wrap(res.err)
		rerr := recordStuck(rctx, w.pool, msg.ID, a.Route, lastErr)
		if rerr != nil && !errors.Is(rerr, errMessageGone) {
			err = errors.Join(err, wrap(rerr))
		}
		w.log.Error("outbox: delivery stuck", append(attrs, "error", lastErr)...)
		switch {
		case !own && rerr != nil && !errors.Is(rerr, errMessageGone):
			// Not recorded: the job is retried, and resumes with it.
			return nil, err
		case !own:
			return nil, nil // the job's own message was delivered
		}
		return nil, river.JobCancel(err)
	}
}

func (w *DeliverWorker) logDelivered(job *river.Job[DeliverArgs], l link, res attempt, elapsed time.Duration) {
	attrs := []any{"message_id", l.msg.ID, "route", job.Args.Route, "topic", l.msg.Topic, "attempt", l.attempt}
	if res.status != 0 {
		attrs = append(attrs, "status_code", res.status)
	}
	w.log.Debug("outbox: delivered", append(attrs, "duration", elapsed)...)
}

// SQL of the worker.
const (
	sqlLoad = `SELECT o.topic, o.payload, o.dedup_key, o.created_at, coalesce(o.ordering_key, ''), d.status
		FROM ferry_outbox o LEFT JOIN ferry_outbox_delivery d ON d.message_id = o.id AND d.route = $2
		WHERE o.id = $1`

	// sqlLockMessage serialises the recordings of one message's
	// deliveries, so that the last route to finish sees every other one
	// done (under READ COMMITTED, two concurrent transactions would each
	// see the other's delivery still pending, and the message would never
	// become delivered).
	sqlLockMessage = `SELECT 1 FROM ferry_outbox WHERE id = $1 FOR NO KEY UPDATE`

	// Delivered is final: no statement moves a delivered row.
	sqlDelivered = `UPDATE ferry_outbox_delivery SET status = 'delivered', attempts = attempts + 1,
		delivered_at = now(), last_error = NULL, next_attempt_at = NULL, updated_at = now()
		WHERE message_id = $1 AND route = $2 AND status <> 'delivered'`

	sqlMessageDelivered = `UPDATE ferry_outbox SET status = 'delivered', delivered_at = now(), last_error = NULL
		WHERE id = $1 AND status <> 'delivered'
		AND NOT EXISTS (SELECT 1 FROM ferry_outbox_delivery WHERE message_id = $1 AND status <> 'delivered')`

	sqlFailed = `UPDATE ferry_outbox_delivery SET status = 'pending', attempts = attempts + 1,
		last_error = $3, next_attempt_at = $4, updated_at = now()
		WHERE message_id = $1 AND route = $2 AND status <> 'delivered'`

	sqlStuck = `UPDATE ferry_outbox_delivery SET status = 'stuck', attempts = attempts + 1,
		last_error = $3, next_attempt_at = NULL, updated_at = now()
		WHERE message_id = $1 AND route = $2 AND status <> 'delivered'`

	sqlMessageStuck = `UPDATE ferry_outbox SET status = 'stuck', last_error = $2 WHERE id = $1 AND status <> 'delivered'`
)

// errMessageGone: the message was deleted (retention) while it was being
// delivered.
var errMessageGone = errors.New("message not found (deleted by retention?)")

func lockMessage(ctx context.Context, tx pgx.Tx, id int64) error {
	return lockedMessage(tx.QueryRow(ctx, sqlLockMessage, id))
}

// lockedMessage reads the row of sqlLockMessage: errMessageGone when the
// message is no more.
func lockedMessage(row pgx.Row) error {
	var one int
	err := row.Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return errMessageGone
	}
	if err != nil {
		return fmt.Errorf("lock message: %w", err)
	}
	return nil
}

// recordDelivered is markDelivered in one round trip: its statements in
// a pipeline, which Postgres runs in one implicit transaction (BEGIN and
// COMMIT would take a round trip each).
func recordDelivered(ctx context.Context, pool *pgxpool.Pool, id int64, route string) error {
	b := &pgx.Batch{}
	queueMarkDelivered(b, id, route)
	br := pool.SendBatch(ctx, b)
	err := readMarkDelivered(br)
	if cerr := br.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("record delivered: %w", cerr)
	}
	return err
}

// deliveredThenNext records msg's delivery to route delivered
// (markDelivered) and claims its chain's next link for job jobID
// (claimNext), in one round trip and one transaction (a pipeline's
// implicit one): a link of a chain costs its job one round trip to
// Postgres after its request.
func deliveredThenNext(ctx context.Context, pool *pgxpool.Pool, jobID int64, route string, msg Message) (_ *link, err error) {
	b := &pgx.Batch{}
	queueMarkDelivered(b, msg.ID, route)
	queueClaimNext(b, jobID, route, msg)
	br := pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("record delivered: %w", cerr)
		}
	}()
	gone := readMarkDelivered(br)
	if gone != nil && !errors.Is(gone, errMessageGone) {
		return nil, gone
	}
	// A message gone leaves no delivered delivery: nothing is claimed.
	next, err := readClaimNext(br, msg)
	if err != nil {
		return nil, err
	}
	return next, gone
}

// markDelivered records the delivery delivered, and the message delivered
// when no delivery of it is left undone, in tx. Its three statements go in
// one round trip (a pipeline, run in order): the message's lock first, so
// that the last route to finish sees every other one done. A message gone
// is errMessageGone, and the caller's transaction rolls back whatever the
// two updates after the lock did.
func markDelivered(ctx context.Context, tx pgx.Tx, id int64, route string) (err error) {
	b := &pgx.Batch{}
	queueMarkDelivered(b, id, route)
	br := tx.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("record delivered: %w", cerr)
		}
	}()
	return readMarkDelivered(br)
}

// queueMarkDelivered queues markDelivered's statements in b, the message's
// lock first; readMarkDelivered reads them: errMessageGone when the
// message is no more (the two updates then change nothing).
func queueMarkDelivered(b *pgx.Batch, id int64, route string) {
	b.Queue(sqlLockMessage, id)
	b.Queue(sqlDelivered, id, route)
	b.Queue(sqlMessageDelivered, id)
}

func readMarkDelivered(br pgx.BatchResults) error {
	gone := lockedMessage(br.QueryRow())
	if gone != nil && !errors.Is(gone, errMessageGone) {
		return gone
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("record delivered: %w", err)
	}
	if _, err := br.Exec(); err != nil {
		return fmt.Errorf("record message delivered: %w", err)
	}
	return gone
}

// markDelivered is markDelivered, and for a message with an ordering key
// when there is no Advance to hand the turn to (handOn), in the same
// transaction, the start of the next delivery of its chain to route
// (startTurns), by the River client of ctx's job. Without one (Work
// called outside River), the relay's release pass starts it later.
func (w *DeliverWorker) markDelivered(ctx context.Context, tx pgx.Tx, msg Message, route string) error {
	if err := markDelivered(ctx, tx, msg.ID, route); err != nil {
		return err
	}
	if msg.OrderingKey == "" || w.advance != nil {
		return nil
	}
	client, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		return nil
	}
	s := starter{ins: client, schema: client.Schema(), maxAttempts: w.maxAttempts}
	n, err := s.startTurns(ctx, tx, []Turn{{Route: route, Topic: msg.Topic, Key: msg.OrderingKey, After: msg.ID}})
	if err != nil {
		return err
	}
	if n > 0 {
		w.log.Debug("outbox: ordered delivery's turn handed on", "route", route, "after", msg.ID)
	}
	return nil
}

// handOn hands the turn of msg's chain to Advance, once msg's delivery to
// route is committed delivered.
func (w *DeliverWorker) handOn(msg Message, route string) {
	if msg.OrderingKey != "" && w.advance != nil {
		w.advance(Turn{Route: route, Topic: msg.Topic, Key: msg.OrderingKey, After: msg.ID})
	}
}

// Priorities of delivery jobs (River's: 1 is fetched first). Every
// delivery job is inserted at priorityDelivery; a retried delivery of an
// ordered chain goes up to priorityRetryKeyed, ahead of the fresh ones:
// its chain waits on it (see the package doc, "Ordered delivery").
const (
	priorityRetryKeyed = 1
	priorityDelivery   = 2
)

// sqlRetryFirst raises the priority of the running job $1 of a keyed
// delivery that failed to $2, before River makes it available for its
// retry (River's completer leaves the priority as it is).
const sqlRetryFirst = `UPDATE river_job SET priority = $2 WHERE id = $1 AND state = 'running' AND priority > $2`

// recordFailed records a failed attempt that River retries at next; for a
// keyed delivery (keyedJob, its running job's id; 0 for an unkeyed one),
// in the same round trip, its retry goes ahead of the fresh deliveries.
func recordFailed(ctx context.Context, pool *pgxpool.Pool, id int64, route, lastErr string, next time.Time, keyedJob int64) error {
	b := &pgx.Batch{}
	b.Queue(sqlFailed, id, route, lastErr, next)
	if keyedJob != 0 {
		b.Queue(sqlRetryFirst, keyedJob, priorityRetryKeyed)
	}
	if err := pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("record failed attempt: %w", err)
	}
	return nil
}

// recordStuck records the attempt, the delivery stuck and the message with
// it (its last_error names the route).
func recordStuck(ctx context.Context, pool *pgxpool.Pool, id int64, route, lastErr string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := lockMessage(ctx, tx, id); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, sqlStuck, id, route, lastErr)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return nil // delivered meanwhile by another job, or no row
		}
		_, err = tx.Exec(ctx, sqlMessageStuck, id, "route "+route+": "+lastErr)
		return err
	})
	if err != nil && !errors.Is(err, errMessageGone) {
		return fmt.Errorf("record stuck: %w", err)
	}
	return err
}

// scrubber returns what must never reach last_error or a log from a
// receiver's answer (a debug page may echo the request): the route's
// secrets in every form they are written (raw, base64, whsec_), the
// signature headers sent and each signature in them, the URL's query
// string and userinfo.
func scrubber(route Route, sigs []string) *strings.Replacer {
	var pairs []string
	for _, key := range route.Secrets {
		b64 := base64.StdEncoding.EncodeToString(key)
		pairs = append(pairs, SecretPrefix+b64, redact.Placeholder, string(key), redact.Placeholder, b64, redact.Placeholder)
	}
	for _, header := range sigs {
		pairs = append(pairs, header, redact.Placeholder)
		for part := range strings.FieldsFuncSeq(header, func(r rune) bool { return r == ' ' || r == ',' }) {
			if v, ok := strings.CutPrefix(part, "v1="); ok {
				part = v
			}
			if len(part) > 2 && part != "v1" && !strings.HasPrefix(part, "t=") {
				pairs = append(pairs, part, redact.Placeholder)
			}
		}
	}
	if u, err := url.Parse(route.URL); err == nil {
		if u.RawQuery != "" {
			pairs = append(pairs, u.RawQuery, "…")
		}
		if u.User != nil {
			pairs = append(pairs, u.User.String(), "…")
		}
	}
	return strings.NewReplacer(pairs...)
}

// readSnippet reads at most jobs.SnippetBytes of r (after scrubbing a
// larger window), trimmed and valid UTF-8, with "…" when cut.
func readSnippet(r io.Reader, scrub *strings.Replacer) string {
	b, _ := io.ReadAll(io.LimitReader(r, jobs.SnippetBytes+scrubWindow))
	s := strings.TrimSpace(scrub.Replace(strings.ToValidUTF8(string(b), "?")))
	return truncate(s, jobs.SnippetBytes)
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut
// with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
