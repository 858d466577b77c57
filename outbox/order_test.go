package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ferryq/ferry/internal/base/logtest"
	"github.com/ferryq/ferry/internal/base/pgtest"
)

// orderedPayload is what the ordered tests write: the key again, and the
// message's place in its key's sequence.
type orderedPayload struct {
	Key string `json:"key"`
	Seq int    `json:"seq"`
}

// orderReceiver is a webhook receiver that records, per key, the sequence
// numbers of the first successful arrival of each message, and counts the
// requests of one key that overlapped (ordered deliveries never do).
type orderReceiver struct {
	mu       sync.Mutex
	arrived  map[string][]int
	seen     map[string]map[int]bool
	inFlight map[string]int
	overlaps int
	// fail says whether to answer the request with status (0: 204); a
	// 503 says Retry-After: 1, so that the retry comes within a second.
	fail func(p orderedPayload) int
}

func newOrderReceiver(fail func(orderedPayload) int) *orderReceiver {
	return &orderReceiver{arrived: map[string][]int{}, seen: map[string]map[int]bool{}, inFlight: map[string]int{}, fail: fail}
}

func (o *orderReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p orderedPayload
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.inFlight[p.Key]++
	if p.Key != "" && o.inFlight[p.Key] > 1 {
		o.overlaps++
	}
	o.mu.Unlock()
	time.Sleep(time.Millisecond) // room for an overlap to show
	status := http.StatusNoContent
	if o.fail != nil {
		status = max(o.fail(p), 0)
		if status == 0 {
			status = http.StatusNoContent
		}
	}
	o.mu.Lock()
	o.inFlight[p.Key]--
	if status < 300 {
		if o.seen[p.Key] == nil {
			o.seen[p.Key] = map[int]bool{}
		}
		if !o.seen[p.Key][p.Seq] {
			o.seen[p.Key][p.Seq] = true
			o.arrived[p.Key] = append(o.arrived[p.Key], p.Seq)
		}
	}
	o.mu.Unlock()
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	w.WriteHeader(status)
}

// violations counts, over every key but the unordered "", the first
// arrivals that came after a later message's.
func (o *orderReceiver) violations() (n, arrivals int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for key, seqs := range o.arrived {
		arrivals += len(seqs)
		if key == "" {
			continue
		}
		for i := 1; i < len(seqs); i++ {
			if seqs[i] < seqs[i-1] {
				n++
			}
		}
	}
	return n, arrivals
}

// orderedFleet is a database with ordered messages, relays and a River
// client working the route's deliveries with a DeliverWorker.
type orderedFleet struct {
	*relayBundle
	client    *river.Client[pgx.Tx]
	logs      *logtest.Recorder
	relayLogs *logtest.Recorder
	route     Route
}

// startOrderedFleet starts relays relays and a River client of workers
// workers for one webhook route to receiver. With handOn, a delivery hands
// its chain's turn to the first relay (DeliverConfig.Advance), as ferry's
// worker does; without, it starts the next delivery itself.
// turnMode is how an ordered fleet's delivered message starts its chain's
// next one.
type turnMode int

const (
	chained           turnMode = iota // by the job that delivered it (the default)
	handedToRelay                     // by a new job, from the relay's Advance
	startedByDelivery                 // by a new job, in the transaction that records it
)

func startOrderedFleet(t *testing.T, b *relayBundle, receiver http.Handler, relays, workers int, mode turnMode) *orderedFleet {
	t.Helper()
	ctx := context.Background()
	srv := hookServer(t, receiver.ServeHTTP)
	route := Route{Topic: "account.changed", Name: "ledger", URL: srv.URL}
	logs := &logtest.Recorder{}
	var first *Relay
	relayLogs := &logtest.Recorder{}
	cfg := DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: logs.Logger()}
	if mode != chained {
		cfg.ChainBudget = -1
	}
	if mode != startedByDelivery {
		cfg.Advance = func(t Turn) { first.Advance(t) }
	}
	w := NewDeliverWorker(cfg)
	client := newRiverClient(t, b.pool, w, map[string]river.QueueConfig{QueueFor(route.Name): {MaxWorkers: workers}})
	startRiver(t, client)
	for i := range relays {
		// A release pass every 10 s, so that the turns are seen to be
		// handed on (or started in the completing transaction).
		r := NewRelay(RelayConfig{Pool: b.pool, Inserter: client, Routes: mustRoutes(t, route), BatchSize: 7,
			PollInterval: 10 * time.Second, Logger: relayLogs.Logger()})
		if i == 0 {
			first = r
		}
		require.NoError(t, r.Start(ctx))
		t.Cleanup(r.Stop)
	}
	return &orderedFleet{relayBundle: b, client: client, logs: logs, relayLogs: relayLogs, route: route}
}

// write adds, in one transaction each, seqs messages per key (keys[i]
// "" writes unordered messages), interleaving the keys.
func (f *orderedFleet) write(t *testing.T, keys []string, seqs int) {
	t.Helper()
	for seq := 1; seq <= seqs; seq++ {
		for _, key := range keys {
			var opts []AddOption
			if key != "" {
				opts = append(opts, WithOrderingKey(key))
			}
			f.add(t, "account.changed", orderedPayload{Key: key, Seq: seq}, opts...)
		}
	}
}

func (f *orderedFleet) waitDelivered(t *testing.T, want int) {
	t.Helper()
	ok := assert.Eventually(t, func() bool {
		return count(t, f.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'delivered'`) == want
	}, 60*time.Second, 50*time.Millisecond, "every message delivered")
	if !ok {
		// What is left, for the failure's reader.
		rows, err := f.pool.Query(context.Background(), `SELECT o.id, coalesce(o.ordering_key, ''), o.status, coalesce(d.status, ''), coalesce(d.job_id, 0), coalesce(j.state::text, ''), coalesce(d.last_error, '')
			FROM ferry_outbox o LEFT JOIN ferry_outbox_delivery d ON d.message_id = o.id LEFT JOIN river_job j ON j.id = d.job_id
			WHERE o.status <> 'delivered' ORDER BY o.id LIMIT 40`)
		require.NoError(t, err)
		for rows.Next() {
			vals, _ := rows.Values()
			t.Log(vals...)
		}
		t.FailNow()
	}
}

// TestOrdered_InOrderThroughFailures: keyed messages, written interleaved,
// reach a receiver that fails a third of its requests at random in their
// key's order, one at a time per key, through two relays and twenty
// workers; unkeyed ones go in parallel.
func TestOrdered_InOrderThroughFailures(t *testing.T) {
	t.Parallel()
	for name, mode := range map[string]turnMode{"Chained": chained, "HandedToTheRelay": handedToRelay, "StartedByTheDelivery": startedByDelivery} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testInOrderThroughFailures(t, mode)
		})
	}
}

func testInOrderThroughFailures(t *testing.T, mode turnMode) {
	b := relaySetup(t)
	var mu sync.Mutex
	rng := rand.New(rand.NewPCG(1, 2))
	receiver := newOrderReceiver(func(orderedPayload) int {
		mu.Lock()
		defer mu.Unlock()
		if rng.IntN(3) == 0 {
			return http.StatusServiceUnavailable
		}
		return 0
	})
	f := startOrderedFleet(t, b, receiver, 2, 20, mode)
	keys := []string{"", ""}
	for i := range 20 {
		keys = append(keys, fmt.Sprintf("acct-%02d", i))
	}
	f.write(t, keys, 10)
	f.waitDelivered(t, len(keys)*10)

	n, arrivals := receiver.violations()
	require.Equal(t, len(keys)*10, arrivals+10, "every message arrived (the two unordered streams share key \"\": 10 of theirs are counted as one key's)")
	require.Zero(t, n, "order violations: %v", receiver.arrived)
	require.Zero(t, receiver.overlaps, "two requests of one key at once")
	require.Greater(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE attempts > 1`), 0, "the receiver's failures were retried")
	for _, key := range keys[2:] {
		require.Equal(t, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, receiver.arrived[key], "key %s", key)
	}
	// How many keyed messages a job of another message delivered (how
	// many the relay relayed before their predecessor's job looked for
	// them is a race; that some went on is not, with retries of a second).
	byAnother := count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE (j.args->>'message_id')::bigint <> d.message_id`)
	if mode == chained {
		require.Positive(t, byAnother, "a job goes on with its chain's next messages")
	} else {
		require.Zero(t, byAnother, "each keyed message has a job of its own")
	}
	require.NotContains(t, f.relayLogs.String(), "ordered deliveries released", "each turn was handed on, none left to the release pass")
}

// TestOrdered_RetryGoesFirst: every delivery job is inserted at River
// priority 2; a keyed delivery's retry goes up to 1, ahead of the fresh
// deliveries (its key waits on it), an unkeyed one's stays.
func TestOrdered_RetryGoesFirst(t *testing.T) {
	t.Parallel()
	b := relaySetup(t)
	var mu sync.Mutex
	failed := map[string]bool{}
	receiver := newOrderReceiver(func(p orderedPayload) int {
		mu.Lock()
		defer mu.Unlock()
		if p.Seq == 1 && !failed[p.Key] { // each key's first message, once
			failed[p.Key] = true
			return http.StatusServiceUnavailable // Retry-After: 1
		}
		return 0
	})
	f := startOrderedFleet(t, b, receiver, 1, 4, handedToRelay)
	f.write(t, []string{"k", ""}, 2)
	f.waitDelivered(t, 4)

	rows, err := b.pool.Query(context.Background(), `SELECT coalesce(o.ordering_key, ''), j.attempt, j.priority
		FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id JOIN river_job j ON j.id = d.job_id ORDER BY o.id`)
	require.NoError(t, err)
	type jobOf struct {
		Key               string
		Attempt, Priority int
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[jobOf])
	require.NoError(t, err)
	require.Equal(t, []jobOf{{"k", 2, 1}, {"", 2, 2}, {"k", 1, 2}, {"", 1, 2}}, got)
}

// TestOrdered_StuckBlocksItsKey: a stuck delivery blocks its key, visibly
// (Stats, List), and no other; Reset of the stuck one releases the key,
// whose messages then arrive in order.
func TestOrdered_StuckBlocksItsKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	var broken sync.Map
	broken.Store("a", true)
	receiver := newOrderReceiver(func(p orderedPayload) int {
		if v, _ := broken.Load(p.Key); v == true && p.Seq == 1 {
			return http.StatusUnprocessableEntity // stuck at once
		}
		return 0
	})
	f := startOrderedFleet(t, b, receiver, 1, 4, chained)
	f.write(t, []string{"a", "b"}, 3)

	require.Eventually(t, func() bool {
		return count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'delivered'`) == 3 &&
			count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'stuck'`) == 1
	}, 30*time.Second, 20*time.Millisecond, "b delivered, a's first stuck")
	time.Sleep(300 * time.Millisecond) // a release pass or three: still blocked
	require.Equal(t, []int{1, 2, 3}, receiver.arrived["b"])
	require.Empty(t, receiver.arrived["a"])

	stats, err := Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Contains(t, stats, Stat{Topic: "account.changed", Route: "ledger", Status: StatusBlocked, Count: 2, Of: StatDeliveries})
	require.Contains(t, stats, Stat{Topic: "account.changed", Route: "ledger", Status: "stuck", Count: 1, Of: StatDeliveries})
	blocked, err := List(ctx, b.pool, ListFilter{Status: StatusBlocked})
	require.NoError(t, err)
	require.Len(t, blocked, 2)
	var stuckID int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT id FROM ferry_outbox WHERE status = 'stuck'`).Scan(&stuckID))
	for _, d := range blocked {
		require.Equal(t, StatusBlocked, d.Wait)
		require.Equal(t, "pending", *d.Status)
		require.Nil(t, d.JobID)
		require.Equal(t, "a", *d.OrderingKey)
		require.Greater(t, d.MessageID, stuckID)
	}

	broken.Store("a", false)
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		_, _, err := Reset(ctx, tx, f.client, []int64{stuckID}, 0)
		return err
	}))
	f.waitDelivered(t, 6)
	require.Equal(t, []int{1, 2, 3}, receiver.arrived["a"])
	blocked, err = List(ctx, b.pool, ListFilter{Status: StatusBlocked})
	require.NoError(t, err)
	require.Empty(t, blocked)
}

// TestOrdered_RelayAndRelease: the relay gives a job to each chain's first
// delivery only, also with relays claiming concurrently in small batches;
// a delivery completed outside River's work context cannot start its
// successor, and the release pass does, once.
func TestOrdered_RelayAndRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	keys := []string{"k1", "k2", "k3", ""}
	f := &orderedFleet{relayBundle: b}
	f.write(t, keys, 6)

	srv := statusHook(t, http.StatusNoContent, "")
	route := Route{Topic: "account.changed", Name: "ledger", URL: srv.URL}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), BatchSize: 2, Logger: slog.New(slog.DiscardHandler)})
		wg.Go(func() {
			for {
				n, err := r.RelayOnce(ctx)
				if err != nil {
					errs <- err
					return
				}
				// A relay that found a chain's lock held handed its turn
				// on: what its turn loop (not started here) does.
				if turns := r.handedTurns(); len(turns) > 0 {
					if _, err := r.TakeTurns(ctx, turns); err != nil {
						errs <- err
						return
					}
				}
				if n == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending'`))
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE (j.args->>'message_id')::bigint <> d.message_id OR j.args->>'route' <> d.route`), "each delivery's job is its own")
	// Each key: its first message has a job, the five others wait.
	rows, err := b.pool.Query(ctx, `SELECT coalesce(o.ordering_key, ''), count(d.job_id), count(*) - count(d.job_id),
			min(o.id) FILTER (WHERE d.job_id IS NOT NULL) = min(o.id)
		FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	type chainJobs struct {
		Key           string
		Jobs, Waiting int
		FirstHasJob   bool
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[chainJobs])
	require.NoError(t, err)
	require.Equal(t, []chainJobs{{"", 6, 0, true}, {"k1", 1, 5, true}, {"k2", 1, 5, true}, {"k3", 1, 5, true}}, got)
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver' AND priority <> 2`), "delivery jobs go in at priority 2")
	stats, err := Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Contains(t, stats, Stat{Topic: "account.changed", Route: "ledger", Status: StatusTurn, Count: 15, Of: StatDeliveries})

	// k1's first delivery, worked without River (no client in the
	// context) and without going on with its chain: delivered, its
	// successor still without a job.
	logs := &logtest.Recorder{}
	w := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: logs.Logger(), ChainBudget: -1})
	var first int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM ferry_outbox WHERE ordering_key = 'k1'`).Scan(&first))
	require.NoError(t, w.Work(ctx, deliverJob(first, "ledger", 1, 24)))
	require.Equal(t, 5, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE job_id IS NULL AND message_id IN (SELECT id FROM ferry_outbox WHERE ordering_key = 'k1')`))

	// A fresh turn is left to the relay it was handed to, for a poll
	// interval; then the release pass takes it.
	n, err := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)}).ReleaseOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "within its poll interval, a turn is left alone")
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), PollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	time.Sleep(20 * time.Millisecond)
	n, err = r.ReleaseOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "k1's second message's turn")
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN river_job j ON j.id = d.job_id
		WHERE d.message_id = (SELECT id FROM ferry_outbox WHERE ordering_key = 'k1' ORDER BY id OFFSET 1 LIMIT 1) AND j.queue = $1`, QueueFor("ledger")))
	n, err = r.ReleaseOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "each chain's turn is taken: nothing more")

	// k2's first delivery hands its turn on (Advance): nothing started
	// until the relay takes the turn; taken twice, it starts one.
	var turns []Turn
	handing := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: logs.Logger(),
		Advance: func(t Turn) { turns = append(turns, t) }, ChainBudget: -1})
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM ferry_outbox WHERE ordering_key = 'k2'`).Scan(&first))
	require.NoError(t, handing.Work(ctx, deliverJob(first, "ledger", 1, 24)))
	require.Equal(t, []Turn{{Route: "ledger", Topic: "account.changed", Key: "k2", After: first}}, turns)
	waitingK2 := `SELECT count(*) FROM ferry_outbox_delivery WHERE job_id IS NULL AND message_id IN (SELECT id FROM ferry_outbox WHERE ordering_key = 'k2')`
	require.Equal(t, 5, count(t, b.pool, waitingK2))
	n, err = r.TakeTurns(ctx, append(turns, turns...))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 4, count(t, b.pool, waitingK2))
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM river_job WHERE kind = 'outbox.deliver' AND priority <> 2`), "a turn's job goes in at priority 2")
	n, err = r.TakeTurns(ctx, turns)
	require.NoError(t, err)
	require.Zero(t, n, "a turn taken twice starts nothing more")
}

// TestOrdered_HeadWhileAnotherHoldsTheChain: a relay relaying a chain's
// message while another holds the chain's lock (a delivery handing its
// turn on, a release pass, another relay) leaves it pending, and passes
// again soon: relayed then, the holder might have taken the chain's next
// place, or missed the message's turn. Once the lock is free it is
// relayed, with its place in its chain.
func TestOrdered_HeadWhileAnotherHoldsTheChain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"k1"}, 1)
	route := Route{Topic: "account.changed", Name: "ledger", URL: statusHook(t, http.StatusNoContent, "").URL}

	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, sqlOrderLocks, []string{"ledger"}, []string{"account.changed"}, []string{"k1"})
	require.NoError(t, err)

	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending'`), "the head is held back: its chain's lock is another's")
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery`))
	require.True(t, r.heldBack.Load(), "the relay passes again soon")

	require.NoError(t, holder.Commit(ctx))
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE job_id IS NOT NULL`), "relayed once the lock is free, with its job")
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE chain_seq IS NULL`), "with its place in its chain")
}

// TestOrdered_TurnsOfOneChainTogether: two turns of one chain taken in
// one batch, one after a link not delivered yet and one after the link
// before it, delivered: the delivered link's turn starts its successor.
// One turn per chain, the latest, would keep the first, which starts
// nothing, and the chain would wait for the release pass.
func TestOrdered_TurnsOfOneChainTogether(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"k1"}, 3)
	var ids []int64
	rows, err := b.pool.Query(ctx, `SELECT id FROM ferry_outbox ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, 3)
	srv := statusHook(t, http.StatusNoContent, "")
	route := Route{Topic: "account.changed", Name: "ledger", URL: srv.URL}
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), BatchSize: 1, PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})

	// The first message gets its job, the second waits behind it.
	for range 2 {
		n, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, n)
	}
	// The third is held back while another holds the chain's lock, and
	// relayed after, waiting too.
	holder, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = holder.Rollback(ctx) }()
	_, err = holder.Exec(ctx, sqlOrderLocks, []string{"ledger"}, []string{"account.changed"}, []string{"k1"})
	require.NoError(t, err)
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending'`), "held back")
	require.NoError(t, holder.Rollback(ctx))
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	waiting := `SELECT array_agg(message_id ORDER BY message_id) FROM ferry_outbox_delivery WHERE job_id IS NULL`
	var still []int64
	require.NoError(t, b.pool.QueryRow(ctx, waiting).Scan(&still))
	require.Equal(t, ids[1:], still)

	// The first is delivered and hands its turn to the relay, which takes
	// it with a turn after the second (not delivered: it starts nothing).
	w := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: slog.New(slog.DiscardHandler),
		Advance: r.Advance, ChainBudget: -1})
	require.NoError(t, w.Work(ctx, deliverJob(ids[0], "ledger", 1, 24)))
	turns := r.handedTurns()
	require.Equal(t, []Turn{{Route: "ledger", Topic: "account.changed", Key: "k1", After: ids[0]}}, turns)
	turns = append([]Turn{{Route: "ledger", Topic: "account.changed", Key: "k1", After: ids[1]}}, turns...)
	n, err = r.TakeTurns(ctx, turns)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the second message's turn came")
	require.NoError(t, b.pool.QueryRow(ctx, waiting).Scan(&still))
	require.Equal(t, ids[2:], still, "the third still waits behind the second")
}

// TestOrdered_TurnWakesWorkers: a turn taken notifies the queue of the
// job it starts, though the River client that inserted it sent no
// notification (at most one per fetch cooldown per queue; here an hour),
// so the workers start the chain's next delivery without waiting for
// their poll (here an hour). So does a release pass.
func TestOrdered_TurnWakesWorkers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := pgtest.PoolFor(t, pgtest.NewDatabase(t, true))
	b := &relayBundle{pool: pool, client: hourCooldownInserter(t, pool)}
	var ids []int64
	for range 4 {
		ids = append(ids, b.add(t, "t", `{}`, WithOrderingKey("k1")))
	}
	rs := mustRoutes(t, webhook("t", "hook"))
	r := NewRelay(RelayConfig{Pool: pool, Inserter: b.client, Routes: rs, PollInterval: time.Millisecond, Logger: slog.New(slog.DiscardHandler)})
	// The first message gets its job, the others wait behind it; the
	// insert spent the inserting client's one notification of the hour.
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	started := startHourPollWorker(t, pool, QueueFor("hook"))
	started(ids[0])

	// Delivered, each hands its turn on.
	for i, id := range ids[:2] {
		require.NoError(t, recordDelivered(ctx, pool, id, "hook"))
		n, err := r.TakeTurns(ctx, []Turn{{Route: "hook", Topic: "t", Key: "k1", After: id}})
		require.NoError(t, err)
		require.Equal(t, 1, n)
		started(ids[i+1])
	}
	// Delivered without handing it on: the release pass starts the next.
	require.NoError(t, recordDelivered(ctx, pool, ids[2], "hook"))
	time.Sleep(10 * time.Millisecond) // past the relay's poll interval
	n, err = r.ReleaseOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	started(ids[3])
}

// TestOrdered_ReleaseElsewhere: a relay configured ReleaseElsewhere runs
// no release pass of its own, however often it polls; RunReleases (ferry
// runs it on its leader) takes the lost turn, and ends with its context.
func TestOrdered_ReleaseElsewhere(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"k1"}, 3)
	srv := statusHook(t, http.StatusNoContent, "")
	route := Route{Topic: "account.changed", Name: "ledger", URL: srv.URL}
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), PollInterval: time.Millisecond,
		ReleaseInterval: time.Millisecond, ReleaseElsewhere: true, Logger: slog.New(slog.DiscardHandler)})
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)

	// The first delivery, worked without River (no client in the
	// context), without a relay to hand its turn to, and without going on
	// with its chain: its turn is lost.
	w := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: slog.New(slog.DiscardHandler), ChainBudget: -1})
	var first int64
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM ferry_outbox WHERE ordering_key = 'k1'`).Scan(&first))
	require.NoError(t, w.Work(ctx, deliverJob(first, "ledger", 1, 24)))
	waiting := `SELECT count(*) FROM ferry_outbox_delivery WHERE job_id IS NULL`
	require.Equal(t, 2, count(t, b.pool, waiting))

	// The relay polls every millisecond for a quarter of a second: no
	// release pass.
	rctx, stop := context.WithCancel(ctx)
	require.NoError(t, r.Start(rctx))
	time.Sleep(250 * time.Millisecond)
	require.Equal(t, 2, count(t, b.pool, waiting), "a relay that releases elsewhere released")

	done := make(chan error, 1)
	go func() { done <- r.RunReleases(rctx) }()
	require.Eventually(t, func() bool { return count(t, b.pool, waiting) == 1 }, 10*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	r.Stop()
	require.Equal(t, 1, count(t, b.pool, waiting), "one turn, one delivery started")
}

// TestAdd_OrderingKey: a key is 1 to 256 characters, from Go and from SQL.
func TestAdd_OrderingKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	for _, key := range []string{"", strings.Repeat("k", 257)} {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := Add(ctx, tx, "t", `{}`, WithOrderingKey(key))
			return err
		})
		require.ErrorIs(t, err, ErrInvalidOrderingKey)
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key) VALUES ('t', '{}', '')`)
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "%v", err)
	require.Equal(t, "ferry_outbox_ordering_key_length", pgErr.ConstraintName)
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox`), "nothing written")

	id := b.add(t, "t", `{}`, WithOrderingKey(strings.Repeat("ü", 256)))
	var key string
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT ordering_key FROM ferry_outbox WHERE id = $1`, id).Scan(&key))
	require.Equal(t, strings.Repeat("ü", 256), key)
}

// TestOrdered_ResetInOrder: a key's deliveries stuck together (as the
// route sweep leaves them) and reset together get one job, the first's;
// the others wait for their turn, and an unordered one is started.
func TestOrdered_ResetInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"a", ""}, 3)
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, Route{Topic: "account.changed", Name: "ledger", URL: "http://127.0.0.1:1/hook"}), Logger: slog.New(slog.DiscardHandler)})
	_, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	// Every delivery stuck, as the route sweep leaves a gone route's.
	_, err = b.pool.Exec(ctx, `UPDATE ferry_outbox_delivery SET status = 'stuck', last_error = 'no live worker declares the route'`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'stuck'`)
	require.NoError(t, err)

	var ids []int64
	rows, err := b.pool.Query(ctx, `SELECT id FROM ferry_outbox ORDER BY id`)
	require.NoError(t, err)
	ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	var deliveries, messages int
	require.NoError(t, pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) (err error) {
		deliveries, messages, err = Reset(ctx, tx, b.client, ids, 0)
		return err
	}))
	require.Equal(t, 6, deliveries)
	require.Equal(t, 6, messages)

	type row struct {
		Key    string
		Status string
		HasJob bool
	}
	rows, err = b.pool.Query(ctx, `SELECT coalesce(o.ordering_key, ''), d.status, d.job_id IS NOT NULL
		FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id ORDER BY o.ordering_key NULLS FIRST, o.id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Equal(t, []row{
		{"", "pending", true}, {"", "pending", true}, {"", "pending", true},
		{"a", "pending", true}, {"a", "pending", false}, {"a", "pending", false},
	}, got)
	stats, err := Stats(ctx, b.pool)
	require.NoError(t, err)
	require.Contains(t, stats, Stat{Topic: "account.changed", Route: "ledger", Status: StatusTurn, Count: 2, Of: StatDeliveries})
}

// TestOrdered_ChainedJob: a delivery job, its own message delivered, goes
// on with its chain's next messages, claimed in the transaction that
// records each delivered; cut off in the middle, run again, it resumes
// with the message it claimed; a claimed message that fails snoozes the
// job until its retry, counted in its delivery, not in River's attempts.
func TestOrdered_ChainedJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	release := make(chan struct{})
	held := make(chan struct{}, 1)
	var mu sync.Mutex
	once := map[string]bool{}
	receiver := newOrderReceiver(func(p orderedPayload) int {
		mu.Lock()
		first := !once[fmt.Sprint(p.Key, p.Seq)]
		once[fmt.Sprint(p.Key, p.Seq)] = true
		mu.Unlock()
		switch {
		case p.Key == "cut" && p.Seq == 3 && first:
			held <- struct{}{}
			<-release // until the test is over; the worker gives up first
			return http.StatusServiceUnavailable
		case p.Key == "fail" && p.Seq == 2 && first:
			return http.StatusServiceUnavailable // Retry-After: 1
		}
		return 0
	})
	srv := hookServer(t, receiver.ServeHTTP)
	t.Cleanup(func() { close(release) })
	route := Route{Topic: "account.changed", Name: "ledger", URL: srv.URL}
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"cut", "fail"}, 5)
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), Logger: slog.New(slog.DiscardHandler)})
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	w := NewDeliverWorker(DeliverConfig{Pool: b.pool, Routes: mustRoutes(t, route), Client: srv.Client(), Logger: slog.New(slog.DiscardHandler)})
	firstOf := func(key string) int64 {
		var id int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT min(id) FROM ferry_outbox WHERE ordering_key = $1`, key).Scan(&id))
		return id
	}
	type delivery struct {
		Seq      int
		Status   string
		JobID    *int64
		Attempts int
	}
	deliveries := func(key string) []delivery {
		rows, err := b.pool.Query(ctx, `SELECT (o.payload->>'seq')::int, d.status, d.job_id, d.attempts
			FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id WHERE o.ordering_key = $1 ORDER BY o.id`, key)
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[delivery])
		require.NoError(t, err)
		return got
	}

	// Cut off while it delivers its chain's third message: the first two
	// are delivered, the third is the job's, the others wait.
	job := deliverJob(firstOf("cut"), "ledger", 1, 24)
	jctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Work(jctx, job) }()
	<-held
	cancel()
	err = <-done
	require.Error(t, err)
	require.NotErrorIs(t, err, &rivertype.JobSnoozeError{})
	require.NotErrorIs(t, err, &rivertype.JobCancelError{})
	firstJob := *deliveries("cut")[0].JobID // the relay's
	id := job.ID
	require.Equal(t, []delivery{{1, "delivered", &firstJob, 1}, {2, "delivered", &id, 1}, {3, "pending", &id, 0}, {4, "pending", nil, 0}, {5, "pending", nil, 0}}, deliveries("cut"))

	// Run again (a retry, a rescue): it resumes with its third message.
	job.Attempt = 2
	require.NoError(t, w.Work(ctx, job))
	require.Equal(t, []delivery{{1, "delivered", &firstJob, 1}, {2, "delivered", &id, 1}, {3, "delivered", &id, 1}, {4, "delivered", &id, 1}, {5, "delivered", &id, 1}}, deliveries("cut"))
	require.Equal(t, []int{1, 2, 3, 4, 5}, receiver.arrived["cut"])

	// A claimed message that fails: the job snoozes until its retry, the
	// one Retry-After: 1 asked for (the worker's clock held still, so the
	// snooze is exactly that).
	clock := time.Now()
	w.now = func() time.Time { return clock }
	job = deliverJob(firstOf("fail"), "ledger", 1, 24)
	err = w.Work(ctx, job)
	var snooze *rivertype.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	require.Equal(t, time.Second, snooze.Duration)
	var next time.Time
	require.NoError(t, b.pool.QueryRow(ctx, `SELECT d.next_attempt_at FROM ferry_outbox o JOIN ferry_outbox_delivery d ON d.message_id = o.id
		WHERE o.ordering_key = 'fail' AND (o.payload->>'seq')::int = 2`).Scan(&next))
	require.WithinDuration(t, clock.Add(snooze.Duration), next, time.Microsecond, "the job wakes when its claimed message is due")
	id = job.ID
	firstJob = *deliveries("fail")[0].JobID
	require.Equal(t, []delivery{{1, "delivered", &firstJob, 1}, {2, "pending", &id, 1}, {3, "pending", nil, 0}, {4, "pending", nil, 0}, {5, "pending", nil, 0}}, deliveries("fail"))
	require.NoError(t, w.Work(ctx, job)) // River runs it again, its attempt unchanged
	require.Equal(t, []delivery{{1, "delivered", &firstJob, 1}, {2, "delivered", &id, 2}, {3, "delivered", &id, 1}, {4, "delivered", &id, 1}, {5, "delivered", &id, 1}}, deliveries("fail"))
	require.Equal(t, []int{1, 2, 3, 4, 5}, receiver.arrived["fail"])
}

// TestOrdered_ReadsByKeyOnStaleStatistics: the statements of ordered
// delivery that walk many waiting deliveries read each one's message, and
// each message's delivery, by primary key, whatever the tables'
// statistics say. Analyzed while every keyed message was still pending
// (chain_seq NULL throughout), the statistics say the chain index is
// empty; a join planned from them scanned that index whole for each
// waiting delivery (seen in the ordered bench: a release pass read a
// billion buffers, 543 s, for 21,642 waiting deliveries). The cost is
// counted in buffers read, not in time.
func TestOrdered_ReadsByKeyOnStaleStatistics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	const keys, perKey = 100, 20
	_, err := b.pool.Exec(ctx, `ALTER TABLE ferry_outbox SET (autovacuum_enabled = off);
		ALTER TABLE ferry_outbox_delivery SET (autovacuum_enabled = off)`)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key)
		SELECT 'account.changed', '{}', 'k' || (i % $1::int) FROM generate_series(0, $1::int * $2::int - 1) i`, keys, perKey)
	require.NoError(t, err)
	_, err = b.pool.Exec(ctx, `ANALYZE ferry_outbox; ANALYZE ferry_outbox_delivery`)
	require.NoError(t, err)
	r := b.relay(t, webhook("account.changed", "ledger"))
	for {
		n, err := r.RelayOnce(ctx)
		require.NoError(t, err)
		if n == 0 {
			break
		}
	}
	const waiting = keys * (perKey - 1)
	require.Equal(t, waiting, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE status = 'pending' AND job_id IS NULL`))

	// buffers is how many buffers the statement read, hit or not.
	buffers := func(sql string, args ...any) int {
		t.Helper()
		var out []byte
		require.NoError(t, b.pool.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+sql, args...).Scan(&out))
		var plan []struct {
			Plan struct {
				Hit  int `json:"Shared Hit Blocks"`
				Read int `json:"Shared Read Blocks"`
			}
		}
		require.NoError(t, json.Unmarshal(out, &plan))
		require.Len(t, plan, 1)
		return plan[0].Plan.Hit + plan[0].Plan.Read
	}
	// Each chain's head (its first message, with a job) and second
	// (waiting for its turn).
	var routes, topics, ks []string
	var heads, seconds []int64
	rows, err := b.pool.Query(ctx, `SELECT ordering_key, (array_agg(id ORDER BY id))[1], (array_agg(id ORDER BY id))[2]
		FROM ferry_outbox GROUP BY ordering_key ORDER BY ordering_key`)
	require.NoError(t, err)
	var key string
	var head, second int64
	_, err = pgx.ForEachRow(rows, []any{&key, &head, &second}, func() error {
		routes, topics, ks = append(routes, "ledger"), append(topics, "account.changed"), append(ks, key)
		heads, seconds = append(heads, head), append(seconds, second)
		return nil
	})
	require.NoError(t, err)
	require.Len(t, heads, keys)

	// A primary-key read is 3 or 4 buffers; each statement reads a few
	// per row it walks. A scan of the chain index per row reads thousands.
	got := buffers(sqlReleasable, DefaultBatchSize, 0)
	assert.Less(t, got, 20*waiting, "release pass: %d buffers for %d waiting deliveries", got, waiting)
	got = buffers(sqlStillReleasable, routes, topics, ks, seconds, 0)
	assert.Less(t, got, 40*keys, "release recheck: %d buffers for %d chains", got, keys)
	got = buffers(sqlTurns, routes, topics, ks, heads)
	assert.Less(t, got, 40*keys, "turns: %d buffers for %d chains", got, keys)
	got = buffers(sqlResetWaits, seconds, routes)
	assert.Less(t, got, 40*keys, "reset: %d buffers for %d deliveries", got, keys)
}
