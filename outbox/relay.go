package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivershared/startstop"
	"github.com/riverqueue/river/rivertype"

	"github.com/ferryq/ferry/internal/base/pglisten"
	"github.com/ferryq/ferry/internal/base/redact"
	"github.com/ferryq/ferry/internal/base/schema"
	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/jobs"
)

// Relay defaults.
const (
	DefaultBatchSize    = 1000
	DefaultPollInterval = time.Second
	// DefaultReleaseInterval is the least time between two release
	// passes; normally a pass finds nothing. A pass reads every waiting
	// ordered delivery: 70 ms for 50,000 on an idle bench machine, 0.3 to
	// 1.1 s on the same machine under the ordered bench's load, so the
	// next one waits releasePace times as long as the last took when that
	// is longer.
	DefaultReleaseInterval = 5 * time.Second
	DefaultMaxAttempts     = 24
	// DefaultRouteGrace is how long a message whose topic no live worker
	// routes waits for a route before it is stuck
	// (FERRY_OUTBOX_ROUTE_GRACE).
	DefaultRouteGrace = 5 * time.Minute
	// Queue is the River queue of outbox.deliver jobs inserted without a
	// route's own queue: by ferry before version 007 of the schema, by
	// hand, or by `enqueue job outbox.deliver`. The relay puts each
	// delivery in its route's queue (QueueFor); a delivery job found in
	// Queue is forwarded there.
	Queue = "outbox"
	// NotifyChannel is what the insert trigger of ferry_outbox notifies
	// (in the default schema; ferry_outbox_channel() names the channel),
	// and what Publish notifies when a worker declares its routes.
	NotifyChannel = "ferry_outbox"
)

// ErrNoRoute is why a message whose topic has no route is stuck: its text
// is the message's last_error.
var ErrNoRoute = errors.New("no route for topic")

// ErrWaitingForRoute is the last_error of a pending message whose topic no
// live worker routes, while it waits for one (RelayConfig.RouteGrace).
var ErrWaitingForRoute = errors.New("waiting for a route")

// ErrWaitingForRoom begins the last_error of a pending message whose
// delivery jobs a route's queue refused because it is at its bound
// (jobs.ErrQueueFull): the message waits, pending, and is relayed once the
// queue has room. It is never stuck for this.
var ErrWaitingForRoom = errors.New("waiting for room")

// Inserter inserts River jobs in a transaction; *river.Client[pgx.Tx]
// implements it.
type Inserter interface {
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// RelayConfig configures a Relay.
type RelayConfig struct {
	Pool *pgxpool.Pool
	// ListenConfig opens the relay's LISTEN session, which needs a session
	// of its own (not a transaction pooler); default Pool's.
	ListenConfig *pgx.ConnConfig
	// Schema is the deployment's FERRY_SCHEMA (internal/base/schema): the relay
	// listens on the channel ferry_outbox_channel() names there,
	// NotifyChannel and the schema's name. Default "": NotifyChannel.
	Schema string
	// Inserter inserts the delivery jobs, in the relay's transaction.
	// The relay wakes the workers of each queue it inserted into itself,
	// in the round trip that records the deliveries (sqlWakeWorkers); a
	// River client also sends that notification, at most once per its
	// FetchCooldown per queue, in a round trip of its own. An insert-only
	// client (no Queues) with the same insert middleware and a long
	// FetchCooldown (and FetchPollInterval) spares the relay's
	// transactions that round trip: ferry's worker gives its relay one
	// with a cooldown of a day.
	Inserter Inserter
	// Routes are this process's own routes, those it delivers. The relay
	// routes each message to these and to every route a live worker has
	// published (Publish, LiveRoutes), by name.
	Routes *Routes
	// RouteGrace is how long a message whose topic no route covers waits
	// (pending, last_error "waiting for a route") before it is stuck with
	// "no route for topic"; default DefaultRouteGrace.
	RouteGrace time.Duration
	// BatchSize is how many messages one transaction claims.
	BatchSize int
	// PollInterval is the fallback when no notification arrives (a lost
	// LISTEN session, a writer that bypassed the trigger).
	PollInterval time.Duration
	// MaxAttempts of each delivery job (FERRY_OUTBOX_MAX_ATTEMPTS).
	MaxAttempts int
	// ReleaseInterval is how often the relay looks for ordered deliveries
	// whose turn came without a job (ReleaseOnce); default
	// DefaultReleaseInterval.
	ReleaseInterval time.Duration
	// ReleaseElsewhere leaves the release passes to RunReleases, run on
	// one process (ferry's worker runs it on its leader): on a backlog,
	// every replica's relay reading every waiting delivery costs as many
	// times one pass. Default: the relay runs them itself.
	ReleaseElsewhere bool
	// Tracer makes the relay's spans: one "outbox.relay" span per traced
	// message (one written with a span in its context), a child of the
	// writer's, and the parent of its delivery jobs. Default: none
	// recorded, though the message's trace context still passes to its
	// delivery jobs.
	Tracer Tracer
	Logger *slog.Logger
}

// Relay moves pending messages into River delivery jobs. It runs on every
// replica: claims use FOR UPDATE SKIP LOCKED, so relays share the work and
// never relay a message twice.
type Relay struct {
	// BaseStartStop gives the relay ferry's one lifecycle shape: Start,
	// Stop (safe twice, and without Start), Started, Stopped.
	startstop.BaseStartStop

	cfg  RelayConfig
	wake chan struct{}

	// filter is what the last relay transaction read of the state the
	// claims filter by (claimFilter); the next one claims by it. filtered
	// says whether one has read it.
	filterMu sync.Mutex
	filter   claimFilter
	filtered bool

	// heldBack says that a relay transaction left keyed messages pending
	// (see order): the loop passes again after heldBackRetry.
	heldBack atomic.Bool

	// The turns of ordered chains handed over by deliveries (Advance),
	// started by turnLoop.
	turnsMu  sync.Mutex
	turns    []Turn
	turnWake chan struct{}
}

// NewRelay returns a relay; Start starts it.
func NewRelay(cfg RelayConfig) *Relay {
	cfg.BatchSize = cmp.Or(cfg.BatchSize, DefaultBatchSize)
	cfg.PollInterval = cmp.Or(cfg.PollInterval, DefaultPollInterval)
	cfg.MaxAttempts = cmp.Or(cfg.MaxAttempts, DefaultMaxAttempts)
	cfg.RouteGrace = cmp.Or(cfg.RouteGrace, DefaultRouteGrace)
	cfg.ReleaseInterval = cmp.Or(cfg.ReleaseInterval, DefaultReleaseInterval)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relay{cfg: cfg, wake: make(chan struct{}, 1), turnWake: make(chan struct{}, 1)}
}

// Start relays in the background until Stop (or ctx ends): at once, on
// every insert notification, and every PollInterval. A failing batch is
// logged and retried on the next wake; it never stops the relay.
func (r *Relay) Start(ctx context.Context) error {
	ctx, shouldStart, started, stopped := r.StartInit(ctx)
	if !shouldStart {
		return nil
	}
	go func() {
		defer stopped()
		started()
		r.run(ctx)
	}()
	return nil
}

func (r *Relay) run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(ctx) })
	wg.Go(func() { r.turnLoop(ctx) })
	defer wg.Wait()
	t := time.NewTimer(0)
	defer t.Stop()
	var nextRelease time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
		if err := r.Drain(ctx); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Error("outbox: relay failed; retrying", "error", redact.Postgres(err.Error()), "retry_in", r.cfg.PollInterval)
		}
		// Busy or not: ordered deliveries whose turn came without a job.
		if !r.cfg.ReleaseElsewhere && !time.Now().Before(nextRelease) {
			nextRelease = time.Now().Add(r.releasePass(ctx))
		}
		if r.heldBack.Swap(false) {
			t.Reset(min(heldBackRetry, r.cfg.PollInterval))
		} else {
			t.Reset(r.cfg.PollInterval)
		}
	}
}

// heldBackRetry is how soon the relay passes again after it left keyed
// messages pending (see order): what held them is another transaction's
// lock of their chain, or a lower id of their key in another relay's
// transaction, both a few milliseconds long.
const heldBackRetry = 10 * time.Millisecond

// releasePace bounds the release passes' share of time: the next pass
// waits at least releasePace times as long as the last one took.
const releasePace = 5

// releasePass runs ReleaseOnce, logs what it did, and returns how long to
// wait before the next: ReleaseInterval, or releasePace times the pass's
// duration when that is longer.
func (r *Relay) releasePass(ctx context.Context) time.Duration {
	start := time.Now()
	n, err := r.ReleaseOnce(ctx)
	wait := max(r.cfg.ReleaseInterval, releasePace*time.Since(start))
	if err != nil && ctx.Err() == nil {
		r.cfg.Logger.Error("outbox: release of ordered deliveries failed; retrying", "error", redact.Postgres(err.Error()), "retry_in", wait)
	} else if n > 0 {
		r.cfg.Logger.Info("outbox: ordered deliveries released", "count", n)
	}
	return wait
}

// RunReleases runs the release passes (ReleaseOnce) until ctx ends, paced
// as the relay paces its own: for a relay configured ReleaseElsewhere, on
// one process (ferry's worker runs it on its leader). A failed pass is
// logged and retried; it returns nil when ctx ends.
func (r *Relay) RunReleases(ctx context.Context) error {
	for {
		t := time.NewTimer(r.releasePass(ctx))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// Drain relays batches until none is full.
func (r *Relay) Drain(ctx context.Context) error {
	for {
		_, full, err := r.relayOnce(ctx)
		if err != nil || !full {
			return err
		}
	}
}

// traceMessage starts the relay span of a traced message (parent set),
// appends its end to ends, and returns the metadata that makes the
// message's delivery jobs its children (without a Tracer, the writer's
// children); nil for a message without a trace.
func (r *Relay) traceMessage(ctx context.Context, id int64, topic string, parent, state *string, ends *[]func(error)) ([]byte, error) {
	if parent == nil {
		return nil, nil
	}
	p, st := *parent, deref(state)
	if r.cfg.Tracer != nil {
		var end func(error)
		p, st, end = r.cfg.Tracer.Relay(ctx, p, st, id, topic)
		*ends = append(*ends, end)
	}
	return traceparent.SetMetadata(nil, p, st)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// SQL of the relay.
const (
	// sqlClaimNew claims messages the relay has not looked at yet.
	// sqlRelayed marks messages relayed.
	sqlRelayed = `UPDATE ferry_outbox SET status = 'relayed', relayed_at = now(), last_error = NULL WHERE id = ANY($1)`
	// sqlRelayedKeyed marks messages relayed, and gives the keyed ones
	// their place in their chains (chainOrder): one value of the ids'
	// sequence for the transaction, taken under the chains' locks.
	sqlRelayedKeyed = `UPDATE ferry_outbox SET status = 'relayed', relayed_at = now(), last_error = NULL,
		chain_seq = CASE WHEN ordering_key IS NOT NULL THEN s.v END
		FROM (SELECT nextval(pg_get_serial_sequence('ferry_outbox', 'id')) AS v) s WHERE id = ANY($1)`
	sqlClaimNew = `SELECT id, topic, false, false, traceparent, tracestate, ordering_key FROM ferry_outbox
		WHERE status = 'pending' AND route_wait_since IS NULL AND NOT (topic = ANY($2))
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	// sqlClaimWaiting claims waiting messages that are due: their topic
	// has a route now ($2), or their grace ($3 seconds) is over (the
	// fourth column).
	sqlClaimWaiting = `SELECT id, topic, true, route_wait_since <= now() - make_interval(secs => $3),
		traceparent, tracestate, ordering_key FROM ferry_outbox
		WHERE status = 'pending' AND route_wait_since IS NOT NULL
		  AND (topic = ANY($2) OR route_wait_since <= now() - make_interval(secs => $3))
		  AND NOT (topic = ANY($4))
		ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`
	// sqlBoundedQueues lists the queues with a bound (an insert into any
	// other never fails for want of room), and whether each is at it,
	// read without a lock (see package jobs, "Bounded queues"): a hint,
	// which the queue's own check makes exact.
	sqlBoundedQueues = `SELECT q.name,
		CASE WHEN q.admitted IS NULL THEN false ELSE ferry_queue_length(q) >= q.max_length END
		FROM ferry_queue q WHERE q.max_length IS NOT NULL`
)

// RelayOnce claims up to BatchSize new pending messages, oldest first, and
// up to BatchSize waiting ones that are due, and in the same transaction
// records one delivery per (message, route) for the routes of this process
// and of every live worker, inserts their outbox.deliver jobs, each in its
// route's queue (QueueFor), and marks the messages relayed. A new message
// whose topic has no route waits: it stays pending with last_error
// ErrWaitingForRoute until a route appears or RouteGrace has passed, and
// then it is stuck with ErrNoRoute. A message whose deliveries a route's
// queue refuses as full (jobs.ErrQueueFull) stays pending with last_error
// ErrWaitingForRoom, and is relayed when the queue has room; messages to
// other queues are relayed meanwhile. It returns how many messages it
// claimed.
//
// A refused statement aborts its transaction, so when one of their queues
// is bounded the delivery jobs are inserted in a savepoint (see relayOnce);
// when a queue refuses them, each message's jobs
// are inserted again in a savepoint of their own, and only the messages
// of full queues stay behind. So that full queues do not fill every batch
// with messages that cannot go (and keep the others waiting behind them),
// the claims leave out the topics one of whose routes' queues is at its
// bound, as ferry_queue said when last read; such messages are claimed
// again once their queues have room, at the latest on the next poll.
func (r *Relay) RelayOnce(ctx context.Context) (int, error) {
	n, _, err := r.relayOnce(ctx)
	return n, err
}

// relayOnce is RelayOnce; full says whether a claim filled its batch.
//
// Its transaction makes five round trips to Postgres when no route's
// queue is bounded (eleven before): BEGIN; the live routes, the bounded
// queues (full or not) and both claims; River's insert of the delivery
// jobs (and its notification of the queue's producers, when its client
// sends one: see RelayConfig.Inserter); the deliveries recorded, the
// messages marked and the workers woken; COMMIT. The statements of each
// step go in one pipeline (pgx.Batch).
//
// The claims, sent with the read of the state they filter by, filter by
// the state the transaction before read (claimFilter; a relay's first
// transaction reads it first, in a round trip of its own), and each
// claimed message is routed by the state read in its own transaction.
// When the state read would let the claims take more (a topic routed
// since, a queue with room again), a second transaction follows at once,
// with it.
//
// The insert runs in a savepoint only when one of its queues is bounded:
// a queue without a bound never refuses a job. A bound set meanwhile that
// refuses one aborts the transaction, and the batch is relayed again at
// once, with savepoints.
func (r *Relay) relayOnce(ctx context.Context) (n int, full bool, err error) {
	for pass := 0; ; pass++ {
		m, f, stale, err := r.relayTx(ctx, false)
		if errors.Is(err, jobs.ErrQueueFull) {
			m, f, stale, err = r.relayTx(ctx, true)
		}
		if err != nil {
			return 0, false, fmt.Errorf("outbox: relay: %w", err)
		}
		n, full = n+m, f
		if !stale || pass > 0 {
			return n, full, nil
		}
	}
}

// claimFilter is what a relay transaction's claims filter by: the topics
// some live route covers (routed: a waiting message of one is due), and
// the topics one of whose routes' queues is at its bound (full: their
// messages are left out).
type claimFilter struct {
	routed, full []string
}

// lets says whether claims by f could take a message that claims by was
// left out: a topic routed that was not, or a topic full that is not.
func (f claimFilter) lets(was claimFilter) bool {
	return slices.ContainsFunc(f.routed, func(t string) bool { return !slices.Contains(was.routed, t) }) ||
		slices.ContainsFunc(was.full, func(t string) bool { return !slices.Contains(f.full, t) })
}

// setFilter stores f as the filter of the next claims.
func (r *Relay) setFilter(f claimFilter) {
	r.filterMu.Lock()
	defer r.filterMu.Unlock()
	r.filter, r.filtered = f, true
}

// claimFilter returns the filter of the next claims, and whether a
// transaction read it (false before the relay's first).
func (r *Relay) claimFilter() (claimFilter, bool) {
	r.filterMu.Lock()
	defer r.filterMu.Unlock()
	return r.filter, r.filtered
}

// relayTx is one relay transaction; careful inserts the delivery jobs in
// a savepoint whatever their queues. stale says whether the state it
// read lets claims take what its own claims left out (claimFilter.lets).
func (r *Relay) relayTx(ctx context.Context, careful bool) (n int, full, stale bool, err error) {
	// The spans of the traced messages relayed, ended with the transaction.
	var ends []func(error)
	defer func() {
		for _, end := range ends {
			end(err)
		}
	}()
	err = pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var (
			routes  map[string][]string
			bounded []string
		)
		b := &pgx.Batch{}
		queueRelayState(b)
		var br pgx.BatchResults
		// readState reads the state from br, and stores what the next
		// claims filter by.
		readState := func() (claimFilter, error) {
			live, bnd, fullQueues, err := readRelayState(br)
			if err != nil {
				return claimFilter{}, err
			}
			routes, bounded = union(live, r.cfg.Routes), bnd
			read := claimFilter{routed: make([]string, 0, len(routes)), full: topicsOf(routes, fullQueues)}
			for topic := range routes {
				read.routed = append(read.routed, topic)
			}
			r.setFilter(read)
			return read, nil
		}
		by, known := r.claimFilter()
		ahead := !known || careful
		if ahead {
			// The relay's first transaction, with nothing read before to
			// claim by, or the one after a bound refused an insert (the
			// state read before did not know it): the state goes first,
			// in a round trip of its own.
			br = tx.SendBatch(ctx, b)
			read, err := readState()
			if cerr := br.Close(); err == nil && cerr != nil {
				err = fmt.Errorf("read live routes and bounded queues: %w", cerr)
			}
			if err != nil {
				return err
			}
			by, b = read, &pgx.Batch{}
		}
		b.Queue(sqlClaimNew, r.cfg.BatchSize, by.full)
		b.Queue(sqlClaimWaiting, r.cfg.BatchSize, by.routed, r.cfg.RouteGrace.Seconds(), by.full)
		br = tx.SendBatch(ctx, b)
		if !ahead {
			// The claims went with the state's statements, queued in b
			// before them.
			read, err := readState()
			if err != nil {
				_ = br.Close()
				return err
			}
			stale = read.lets(by)
		}
		var (
			id            int64
			topic         string
			waiting, due  bool
			parent, state *string
			key           *string
			relayed       []int64
			waitNow       []int64
			noRoute       []int64
			msgIDs        []int64
			names         []string
			params        []river.InsertManyParams
			// The topic and ordering key of each delivery (parallel to
			// params; key "" for none), and whether any has a key.
			topics, keys []string
			keyed        bool
		)
		claim := func(rows pgx.Rows) error {
			c, err := pgx.ForEachRow(rows, []any{&id, &topic, &waiting, &due, &parent, &state, &key}, func() error {
				rs := routes[topic]
				switch {
				case len(rs) == 0 && waiting && due:
					noRoute = append(noRoute, id) // its grace is over
				case len(rs) == 0 && waiting:
					// Claimed for a route the last state had and this one
					// has not: it waits on, its grace running.
				case len(rs) == 0:
					waitNow = append(waitNow, id)
				default:
					relayed = append(relayed, id)
					metadata, err := r.traceMessage(ctx, id, topic, parent, state, &ends)
					if err != nil {
						return err
					}
					for _, name := range rs {
						msgIDs, names = append(msgIDs, id), append(names, name)
						topics, keys = append(topics, topic), append(keys, deref(key))
						keyed = keyed || key != nil
						params = append(params, river.InsertManyParams{
							Args:       DeliverArgs{MessageID: id, Route: name},
							InsertOpts: &river.InsertOpts{Queue: QueueFor(name), MaxAttempts: r.cfg.MaxAttempts, Metadata: metadata, Priority: priorityDelivery},
						})
					}
				}
				return nil
			})
			if err != nil {
				return fmt.Errorf("claim messages: %w", err)
			}
			n += int(c.RowsAffected())
			full = full || int(c.RowsAffected()) >= r.cfg.BatchSize
			return nil
		}
		for range 2 {
			rows, _ := br.Query() // its error is the rows'
			if err := claim(rows); err != nil {
				_ = br.Close()
				return err
			}
		}
		if err := br.Close(); err != nil {
			return fmt.Errorf("claim messages: %w", err)
		}
		if len(params) > 0 {
			// Deliveries of a keyed message that must wait behind their
			// key's predecessor get no job now (see order); the others'
			// jobs are inserted.
			var waitMsgs []int64
			var waitNames, waitTopics, waitKeys []string
			if keyed {
				wait, hold, err := order(ctx, tx, names, topics, keys, msgIDs)
				if err != nil {
					return err
				}
				var k int
				for i := range params {
					switch {
					case hold[i]:
						// Left pending, for the next pass.
						relayed = slices.DeleteFunc(relayed, func(id int64) bool { return id == msgIDs[i] })
						r.heldBack.Store(true)
						full = false
					case wait[i]:
						waitMsgs, waitNames = append(waitMsgs, msgIDs[i]), append(waitNames, names[i])
						waitTopics, waitKeys = append(waitTopics, topics[i]), append(waitKeys, keys[i])
					default:
						params[k], msgIDs[k], names[k], topics[k], keys[k] = params[i], msgIDs[i], names[i], topics[i], keys[i]
						k++
					}
				}
				params, msgIDs, names, topics, keys = params[:k], msgIDs[:k], names[:k], topics[:k], keys[:k]
			}
			inSavepoint := careful || slices.ContainsFunc(params, func(p river.InsertManyParams) bool {
				return slices.Contains(bounded, p.InsertOpts.Queue)
			})
			var (
				jobIDs   []int64
				waitRoom map[int64]string
				queues   []string // of the jobs inserted
			)
			if len(params) > 0 {
				jobIDs, waitRoom, err = r.insertDeliveries(ctx, tx, params, msgIDs, inSavepoint)
				if err != nil {
					return fmt.Errorf("insert delivery jobs: %w", err)
				}
				queues = insertedQueues(params, jobIDs)
			}
			// The waiting deliveries are recorded without a job (0: NULL).
			msgIDs, names = append(msgIDs, waitMsgs...), append(names, waitNames...)
			jobIDs = append(jobIDs, make([]int64, len(waitMsgs))...)
			if len(waitRoom) > 0 {
				// A keyed message refused keeps its key's later messages
				// of the batch pending too: relayed without it, they would
				// take the earlier places in its chains.
				for i := range params {
					if _, ok := waitRoom[msgIDs[i]]; ok && keys[i] != "" {
						id := msgIDs[i]
						for j, wid := range waitMsgs {
							if topics[i] == waitTopics[j] && keys[i] == waitKeys[j] && wid > id {
								waitRoom[wid] = waitRoom[id]
							}
						}
					}
				}
				relayed = slices.DeleteFunc(relayed, func(id int64) bool { _, ok := waitRoom[id]; return ok })
				var k int
				for i := range msgIDs {
					if _, ok := waitRoom[msgIDs[i]]; !ok {
						msgIDs[k], names[k], jobIDs[k] = msgIDs[i], names[i], jobIDs[i]
						k++
					}
				}
				msgIDs, names, jobIDs = msgIDs[:k], names[:k], jobIDs[:k]
				ids, texts := make([]int64, 0, len(waitRoom)), make([]string, 0, len(waitRoom))
				for id, text := range waitRoom {
					ids, texts = append(ids, id), append(texts, text)
				}
				if _, err := tx.Exec(ctx, `UPDATE ferry_outbox o SET last_error = u.text
					FROM unnest($1::bigint[], $2::text[]) AS u(id, text) WHERE o.id = u.id`, ids, texts); err != nil {
					return fmt.Errorf("mark waiting for room: %w", err)
				}
				r.cfg.Logger.Warn("outbox: messages wait for room: a route's queue is full", "count", len(waitRoom), "error", texts[0])
				// Drain no further: those messages would be claimed again
				// at once. The next wake or poll tries them again.
				full = false
			}
			// Recorded and marked, and the workers woken, in one round
			// trip.
			b := &pgx.Batch{}
			b.Queue(`INSERT INTO ferry_outbox_delivery (message_id, route, job_id)
				SELECT m, r, NULLIF(j, 0) FROM unnest($1::bigint[], $2::text[], $3::bigint[]) AS u(m, r, j)`, msgIDs, names, jobIDs)
			if keyed {
				b.Queue(sqlRelayedKeyed, relayed)
			} else {
				b.Queue(sqlRelayed, relayed)
			}
			if len(queues) > 0 {
				b.Queue(sqlWakeWorkers, r.cfg.Schema, queues)
			}
			if err := tx.SendBatch(ctx, b).Close(); err != nil {
				return fmt.Errorf("record deliveries and mark relayed: %w", err)
			}
		}
		if len(waitNow) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE ferry_outbox SET route_wait_since = now(), last_error = $2 WHERE id = ANY($1)`, waitNow, ErrWaitingForRoute.Error()); err != nil {
				return fmt.Errorf("mark waiting for a route: %w", err)
			}
			r.cfg.Logger.Warn("outbox: messages wait for a route: no live worker routes their topic", "count", len(waitNow), "first_id", waitNow[0], "grace", r.cfg.RouteGrace)
		}
		if len(noRoute) > 0 {
			if _, err := tx.Exec(ctx, `UPDATE ferry_outbox SET status = 'stuck', last_error = $2 WHERE id = ANY($1)`, noRoute, ErrNoRoute.Error()); err != nil {
				return fmt.Errorf("mark unrouted: %w", err)
			}
			r.cfg.Logger.Warn("outbox: messages with no route for their topic are stuck", "count", len(noRoute), "first_id", noRoute[0], "grace", r.cfg.RouteGrace)
		}
		return nil
	})
	return n, full, stale, err
}

// sqlWakeWorkers sends, for each queue in $2, the insert notification
// River's client sends when it inserts available jobs (channel
// <schema>.river_insert, payload {"queue": "<name>"}; $1 the schema, ""
// for the connection's current one), on which every River producer of
// that queue fetches.
//
// River's client sends it at most once per fetch cooldown per queue: a
// relay transaction that commits inside that window, after the fetch the
// last notification caused, left its delivery jobs to the workers' next
// poll (FERRY_FETCH_POLL_INTERVAL, 100 ms), the tail of the outbox's
// commit-to-delivery latency. The relay sends it in every transaction
// that inserted jobs, and so does every transaction that starts waiting
// deliveries of ordered chains (a turn taken, a release pass: startWaiting);
// Postgres delivers identical notifications of one transaction once, so
// where River sent its own this adds nothing. Its cost is one
// notification per transaction, not per message. It is SQL of its own
// rather than River's driver (NotifyMany, as jobs.CopyTx and the limiter
// send it) so that it rides in the batch that records the deliveries,
// without a round trip of its own; TestWakeWorkers holds it to River's
// channel and payload.
const sqlWakeWorkers = `SELECT pg_notify(concat(coalesce(NULLIF($1::text, ''), current_schema()), '.river_insert'), format('{"queue": %s}', to_json(q)))
	FROM unnest($2::text[]) AS q`

// insertedQueues returns the queues of the jobs inserted (jobIDs,
// parallel to params: 0 for one refused), each once.
func insertedQueues(params []river.InsertManyParams, jobIDs []int64) []string {
	var queues []string
	for i, p := range params {
		if jobIDs[i] != 0 && !slices.Contains(queues, p.InsertOpts.Queue) {
			queues = append(queues, p.InsertOpts.Queue)
		}
	}
	return queues
}

// queueRelayState queues in b what a relay transaction routes and claims
// by: the routes of live workers (LiveRoutes), the bounded queues and
// those of them at their bound; first, the statement that makes the
// transaction's commit asynchronous (sqlRelayCommitAsync), which so costs
// no round trip of its own. readRelayState reads them.
func queueRelayState(b *pgx.Batch) {
	b.Queue(sqlRelayCommitAsync)
	b.Queue(sqlLiveRoutes)
	b.Queue(sqlBoundedQueues)
}

func readRelayState(br pgx.BatchResults) (live map[string][]string, bounded, full []string, err error) {
	if _, err := br.Exec(); err != nil {
		return nil, nil, nil, fmt.Errorf("set the relay's commit asynchronous: %w", err)
	}
	rows, _ := br.Query() // its error is the rows'
	if live, err = collectRoutes(rows); err != nil {
		return nil, nil, nil, err
	}
	rows, _ = br.Query()
	var (
		name string
		atIt bool
	)
	if _, err := pgx.ForEachRow(rows, []any{&name, &atIt}, func() error {
		bounded = append(bounded, name)
		if atIt {
			full = append(full, name)
		}
		return nil
	}); err != nil {
		return nil, nil, nil, fmt.Errorf("read bounded queues: %w", err)
	}
	return live, bounded, full, nil
}

// topicsOf returns the topics one of whose routes' queues is in full.
func topicsOf(routes map[string][]string, full []string) []string {
	topics := []string{}
	if len(full) == 0 {
		return topics
	}
	for topic, rs := range routes {
		if slices.ContainsFunc(rs, func(name string) bool { return slices.Contains(full, QueueFor(name)) }) {
			topics = append(topics, topic)
		}
	}
	return topics
}

// insertDeliveries inserts params (the delivery jobs of the messages
// msgIDs, parallel to params, each message's jobs next to each other) in
// a savepoint of tx when inSavepoint, else in tx itself, and returns their
// job ids. When a queue refuses them as full (in a savepoint), it inserts
// each message's jobs in a savepoint of their own and returns, for each
// message refused, its last_error (ErrWaitingForRoom and why); a refused
// message's job ids are 0. Outside a savepoint a refusal is the error
// (jobs.ErrQueueFull), and tx is aborted.
func (r *Relay) insertDeliveries(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams, msgIDs []int64, inSavepoint bool) ([]int64, map[int64]string, error) {
	jobIDs := make([]int64, len(params))
	if !inSavepoint {
		res, err := r.cfg.Inserter.InsertManyTx(ctx, tx, params)
		if err != nil {
			return nil, nil, jobs.AsQueueFull(err)
		}
		for i, jr := range res {
			jobIDs[i] = jr.Job.ID
		}
		return jobIDs, nil, nil
	}
	insert := func(lo, hi int) error {
		return pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
			res, err := r.cfg.Inserter.InsertManyTx(ctx, sp, params[lo:hi])
			if err != nil {
				return jobs.AsQueueFull(err)
			}
			for i, jr := range res {
				jobIDs[lo+i] = jr.Job.ID
			}
			return nil
		})
	}
	err := insert(0, len(params))
	if !errors.Is(err, jobs.ErrQueueFull) {
		return jobIDs, nil, err
	}
	waitRoom := map[int64]string{}
	for lo := 0; lo < len(params); {
		hi := lo + 1
		for hi < len(params) && msgIDs[hi] == msgIDs[lo] {
			hi++
		}
		switch err := insert(lo, hi); {
		case errors.Is(err, jobs.ErrQueueFull):
			waitRoom[msgIDs[lo]] = fmt.Sprintf("%s: %s", ErrWaitingForRoom, err)
		case err != nil:
			return nil, nil, err
		}
		lo = hi
	}
	return jobIDs, waitRoom, nil
}

// listen keeps a LISTEN session on NotifyChannel and wakes the loop on
// every notification and every reconnect (messages may have arrived while
// the session was down).
func (r *Relay) listen(ctx context.Context) {
	cc := r.cfg.Pool.Config().ConnConfig
	if r.cfg.ListenConfig != nil {
		cc = r.cfg.ListenConfig
	}
	cc = cc.Copy()
	cc.RuntimeParams["application_name"] = "ferry-outbox-relay"
	pglisten.Run(ctx, pglisten.Config{
		ConnConfig:  cc,
		Channel:     schema.Channel(NotifyChannel, r.cfg.Schema),
		OnListening: r.poke,
		OnNotify:    func(*pgconn.Notification) { r.poke() },
		MaxBackoff:  30 * time.Second,
		Logger:      r.cfg.Logger,
		Name:        "outbox: relay listener (polling meanwhile)",
	})
}

func (r *Relay) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// sqlRelayCommitAsync makes the relay transaction's commit asynchronous:
// it returns without waiting for its WAL to reach disk (or a synchronous
// standby). The commit's flush was one of the two on the outbox's path
// from commit to delivery (River's fetch of the delivery job is the
// other), and under write load a flush waits behind every other
// backend's WAL and the checkpointer's fsyncs. In seven paired runs of
// `bench -mode outbox` on a busy 2-core machine, the tail's median leg
// from the relay transaction to the fetch (the messages at or above the
// p99) was shorter with it in five, 13.2 ms against 18.5 over the runs;
// the whole p99 swung with the machine (10 to 43 ms either way).
//
// It changes no guarantee. Other sessions see the transaction at once,
// and nothing that acts on it is durable before it is: a delivery job is
// worked only after River's fetch commits, synchronously, and a flush of
// that commit (or its wait for a standby) covers all WAL written before
// it, the relay's included. So a crash or a failover can lose a relay
// transaction only if no delivery of it had started: its messages are
// pending again and relayed again, which is what a relay that crashed
// before its commit leaves. The sender's own transaction (Add) keeps the
// connection's setting.
const sqlRelayCommitAsync = `SET LOCAL synchronous_commit = off`
