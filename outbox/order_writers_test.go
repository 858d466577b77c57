package outbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gateReceiver is a webhook receiver that counts the requests of each key
// in flight at once (the most it saw, per key), records the first arrival
// of each message (its seq) in order, and holds the request of a seq
// given a gate until the gate is opened.
type gateReceiver struct {
	mu          sync.Mutex
	inFlight    map[string]int
	maxInFlight map[string]int
	arrived     []int
	gates       map[int]chan struct{}
	arrival     chan int // each request's seq, as it arrives
}

func newGateReceiver(held ...int) *gateReceiver {
	g := &gateReceiver{inFlight: map[string]int{}, maxInFlight: map[string]int{}, gates: map[int]chan struct{}{}, arrival: make(chan int, 100)}
	for _, seq := range held {
		g.gates[seq] = make(chan struct{})
	}
	return g
}

func (g *gateReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var p orderedPayload
	if err := json.Unmarshal(body, &p); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	g.mu.Lock()
	g.inFlight[p.Key]++
	g.maxInFlight[p.Key] = max(g.maxInFlight[p.Key], g.inFlight[p.Key])
	if !slices.Contains(g.arrived, p.Seq) {
		g.arrived = append(g.arrived, p.Seq)
	}
	gate := g.gates[p.Seq]
	g.mu.Unlock()
	g.arrival <- p.Seq
	if gate != nil {
		select {
		case <-gate:
		case <-r.Context().Done():
		}
	}
	g.mu.Lock()
	g.inFlight[p.Key]--
	g.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// open lets the held requests of seq go.
func (g *gateReceiver) open(seq int) { close(g.gates[seq]) }

// waitArrival waits for the first request of seq.
func (g *gateReceiver) waitArrival(t *testing.T, seq int) {
	t.Helper()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case s := <-g.arrival:
			if s == seq {
				return
			}
		case <-timeout:
			t.Fatalf("message %d never reached the receiver", seq)
		}
	}
}

func (g *gateReceiver) snapshot() (maxInFlight map[string]int, arrived []int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	maxInFlight = map[string]int{}
	for k, v := range g.maxInFlight {
		maxInFlight[k] = v
	}
	return maxInFlight, append([]int(nil), g.arrived...)
}

// TestOrdered_ConcurrentWritersOfOneKey: writers of one key whose
// transactions overlap commit out of id order. Writer 1 takes the lowest
// id and holds its transaction open; writer 2's message (a higher id) is
// committed and delivered, writer 3's is committed and held in flight by
// the receiver; then writer 1 commits, and writer 4 writes after it. At
// most one delivery of the chain is in flight at any moment, at the
// receiver and in the database (one delivery with a job not delivered),
// and the key's messages arrive in the order they were committed: 2, 3,
// 1, 4. Before the fix, writer 1's message found no predecessor (none
// with a lower id) and got a job while writer 3's was in flight.
func TestOrdered_ConcurrentWritersOfOneKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	receiver := newGateReceiver(3)
	f := startOrderedFleet(t, b, receiver, 1, 4, chained)
	const key = "acct-1"

	first, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = first.Rollback(context.WithoutCancel(ctx)) }()
	id1, err := Add(ctx, first, "account.changed", orderedPayload{Key: key, Seq: 1}, WithOrderingKey(key))
	require.NoError(t, err)

	id2 := f.add(t, "account.changed", orderedPayload{Key: key, Seq: 2}, WithOrderingKey(key))
	require.Greater(t, id2, id1)
	receiver.waitArrival(t, 2)
	f.waitDelivered(t, 1)
	id3 := f.add(t, "account.changed", orderedPayload{Key: key, Seq: 3}, WithOrderingKey(key))
	receiver.waitArrival(t, 3) // held: in flight

	require.NoError(t, first.Commit(ctx))
	// The relay's decision on message 1: a job (it may start only once 3
	// is delivered, which the receiver holds) or waiting for its turn.
	require.Eventually(t, func() bool {
		return count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1`, id1) == 1
	}, 60*time.Second, 10*time.Millisecond, "message 1 relayed")
	jobs := count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery d JOIN ferry_outbox o ON o.id = d.message_id
		WHERE o.ordering_key = $1 AND d.status = 'pending' AND d.job_id IS NOT NULL`, key)
	if count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1 AND job_id IS NOT NULL`, id1) == 1 {
		// It has a job: let it reach the receiver, while 3 is held.
		receiver.waitArrival(t, 1)
	}
	require.Equal(t, 1, jobs, "deliveries of the chain with a job, not delivered (message 3's in flight, message 1's waiting)")

	f.add(t, "account.changed", orderedPayload{Key: key, Seq: 4}, WithOrderingKey(key))
	receiver.open(3)
	f.waitDelivered(t, 4)

	maxInFlight, arrived := receiver.snapshot()
	require.Equal(t, 1, maxInFlight[key], "deliveries of one key in flight at once, at the receiver")
	require.Equal(t, []int{2, 3, 1, 4}, arrived, "the key's messages arrive in the order of their commits")
	require.Less(t, id2, id3)
}

// TestOrdered_LowerIDInAnotherRelay: a relay that finds a message of its
// batch's key with a lower id pending (claimed by another relay, whose
// transaction holds it) leaves the key's messages pending: relayed first,
// they would take the earlier places in the chain, and one writer's
// messages would go out of their order.
func TestOrdered_LowerIDInAnotherRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"k1"}, 2)
	route := Route{Topic: "account.changed", Name: "ledger", URL: statusHook(t, http.StatusNoContent, "").URL}
	r := NewRelay(RelayConfig{Pool: b.pool, Inserter: b.client, Routes: mustRoutes(t, route), PollInterval: time.Hour, Logger: slog.New(slog.DiscardHandler)})

	other, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(context.WithoutCancel(ctx)) }()
	var lower int64
	require.NoError(t, other.QueryRow(ctx, `SELECT id FROM ferry_outbox ORDER BY id LIMIT 1 FOR UPDATE`).Scan(&lower))
	n, err := r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the relay claimed the higher id")
	require.Equal(t, 2, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending'`), "the higher id held back")
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery`))

	require.NoError(t, other.Rollback(ctx))
	n, err = r.RelayOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE message_id = $1 AND job_id IS NOT NULL`, lower), "the lower id first, with its job")
	require.Equal(t, 1, count(t, b.pool, `SELECT count(*) FROM ferry_outbox_delivery WHERE message_id <> $1 AND job_id IS NULL`, lower), "the higher waits behind it")
}

// TestOrdered_PlaceOfAnOlderRelay: a relay of an older version (a
// rolling deploy) marks keyed messages relayed without their place in
// their chains; the database gives them one, one for its transaction, so
// that their deliveries are links of their chains (found by the look-ups,
// started in turn), never waiting unseen.
func TestOrdered_PlaceOfAnOlderRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	f := &orderedFleet{relayBundle: b}
	f.write(t, []string{"k1", ""}, 2)
	_, err := b.pool.Exec(ctx, `UPDATE ferry_outbox SET status = 'relayed', relayed_at = now(), last_error = NULL WHERE id = ANY(SELECT id FROM ferry_outbox)`)
	require.NoError(t, err)
	require.Equal(t, 1, count(t, b.pool, `SELECT count(DISTINCT chain_seq) FROM ferry_outbox WHERE ordering_key IS NOT NULL`), "one place for the transaction")
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE ordering_key IS NOT NULL AND chain_seq IS NULL`))
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE ordering_key IS NULL AND chain_seq IS NOT NULL`), "unkeyed messages have none")
	require.Equal(t, 2, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE ordering_key IS NOT NULL AND chain_seq > (SELECT max(id) FROM ferry_outbox)`), "after every id taken before")
}

// TestOrdered_RelaysKeepCommitOrder: a backlog written a statement at a
// time (each key's messages committed in id order) and relayed by three
// relays at once is placed in its chains in id order. A claim skips the
// messages another relay's transaction holds (SKIP LOCKED), so a batch
// may hold a key's fifth and seventh messages while another holds its
// sixth: the relay holds the key's messages back until the gap is gone,
// rather than place the seventh before the sixth.
func TestOrdered_RelaysKeepCommitOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := relaySetup(t)
	const keys, perKey = 1000, 10
	for seq := 1; seq <= perKey; seq++ {
		_, err := b.pool.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key)
			SELECT 'account.changed', jsonb_build_object('key', 'k' || k, 'seq', $1::int), 'k' || k FROM generate_series(1, $2::int) k`, seq, keys)
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		r := b.relay(t, webhook("account.changed", "ledger"))
		wg.Go(func() {
			for count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE status = 'pending'`) > 0 {
				if _, err := r.RelayOnce(ctx); err != nil {
					errs <- err
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
	require.Equal(t, keys*perKey, count(t, b.pool, `SELECT count(*) FROM ferry_outbox WHERE chain_seq IS NOT NULL`))
	require.Zero(t, count(t, b.pool, `SELECT count(*) FROM (
			SELECT row_number() OVER (PARTITION BY ordering_key ORDER BY id) AS by_id,
			       row_number() OVER (PARTITION BY ordering_key ORDER BY chain_seq, id) AS in_chain
			FROM ferry_outbox) x
		WHERE by_id <> in_chain`), "messages whose place in their chain is not their commit order")
}
