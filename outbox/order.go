package outbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/ferryq/ferry/internal/base/traceparent"
	"github.com/ferryq/ferry/jobs"
)

// Ordered delivery (see the package doc): for each route and each
// (topic, ordering key), at most one delivery has a job at a time, the
// key's first undelivered message's. Four places start a chain's
// delivery, each holding the chain's advisory transaction lock, so that
// none misses another's commit:
//
//   - the job that delivered the link before it (claimNext): in the
//     pipeline that records its message delivered, it makes the next
//     waiting delivery its own, and delivers it itself, for its chain
//     budget (DefaultChainBudget); a job run again after it claimed one
//     resumes with it;
//   - the relay (order): a keyed delivery gets its job only when it is
//     the first of its chain in the batch and the chain's last link is
//     delivered to the route (or there is none); the others are recorded
//     waiting, job_id NULL. It gives them their places in their chains
//     (chainOrder). It only tries the locks: the messages of a chain
//     another holds stay pending, for its next pass (the holder could
//     not see them, and a relay holding it may be taking the next
//     places);
//   - the delivery that completes past its job's chain budget, or to a
//     Go handler, hands the turn on: to its process's
//     relay (DeliverConfig.Advance, Relay.Advance), which starts the
//     successors of the turns handed to it meanwhile in one transaction
//     (TakeTurns, after the turn's message is delivered only); without a
//     relay to hand it to, in the completing transaction itself
//     (startTurns);
//   - the relay's release pass (Relay.ReleaseOnce), for what neither did:
//     a turn lost with its process, a successor's job refused by a full
//     queue, a predecessor deleted by hand. It only tries the locks too.
//
// A stuck delivery hands nothing on: its key is blocked for its route
// until Reset gives it a new job, and its delivery hands the turn on.

// orderLockKey is the advisory lock key of the chain of columns r (route),
// t (topic) and k (key): every statement that locks a chain uses it.
const orderLockKey = `hashtextextended('ferry.outbox.order/' || r || '/' || t || '/' || k, 0)`

// sqlOrderLocks takes the advisory transaction locks of the chains
// ($1 routes, $2 topics, $3 keys, parallel), in the order of their lock
// keys, so that two transactions locking several never deadlock.
const sqlOrderLocks = `SELECT count(pg_advisory_xact_lock(lk)) FROM (
	SELECT DISTINCT ` + orderLockKey + ` AS lk
	FROM unnest($1::text[], $2::text[], $3::text[]) AS u(r, t, k) ORDER BY 1) s`

// sqlPredecessor reads, for u(route, topic, key, seq, id), the chain's
// link before the one at place (seq, id): its id, whether it is not done
// with the route (its delivery to the route not delivered: waiting,
// running, retrying or stuck), and when it was delivered. A chain's links
// are its relayed messages with a delivery to the route, in the order
// they were relayed (chainOrder); messages with no delivery to the route
// (relayed before the route existed, stuck for want of one) are no link
// of its chain. Only the latest link counts: a delivery gets its job
// after every earlier one was delivered. Used as LEFT JOIN LATERAL (…)
// AS prev(id, open, delivered_at).
//
// The link's delivery is read by its primary key, once per message of the
// chain walked (sqlDeliveryOf), never joined: a join with the deliveries
// is planned from the table's statistics, and on a table filled since its
// last analyze the planner took a hash join or a materialised scan that
// read every delivery of the route per chain (seen in the ordered bench:
// 150 to 500 delivery rows read per message delivered).
var sqlPredecessor = `SELECT p.id, pd.status <> 'delivered', pd.delivered_at
	FROM ferry_outbox p LEFT JOIN LATERAL (` + sqlDeliveryOf("p.id", "u.route") + `) pd ON true
	WHERE p.topic = u.topic AND p.ordering_key = u.key AND p.chain_seq IS NOT NULL
	  AND (p.chain_seq, p.id) < (u.seq, u.id) AND pd.status IS NOT NULL
	ORDER BY p.chain_seq DESC, p.id DESC LIMIT 1`

// chainOrder is an ordered chain's order (see the package doc, "Ordered
// delivery"): the order its messages were relayed in. The relay sets a
// keyed message's chain_seq when it relays it, under the locks of its
// chains (sqlRelayedKeyed): one value of the ids' sequence per relay
// transaction, higher than every place taken before, so a message that
// commits after a later id of its key was relayed comes after it; ties
// (one transaction's messages) go by id. A relay never relays a key's
// message while one of a lower id is pending (it waits in another relay's
// transaction), so one writer's messages keep their id order. (A relay
// of an older version, during a rolling deploy, sets no place: migration
// 029's trigger gives its messages one, one for its transaction.)
//
// A message being relayed has no place yet; it goes after every link:
// chainEnd is the place its predecessor is read before.
const chainEnd = int64(1<<63 - 1)

// sqlDeliveryOf reads the delivery of message id to route (columns of the
// enclosing query) by its primary key, as a LATERAL subquery. Its LIMIT
// keeps the planner from pulling it up into a join of the two tables: it
// stays a lookup, run per row of the enclosing query, whose plan (the
// primary key's index) does not depend on the table's statistics.
func sqlDeliveryOf(id, route string) string {
	return `SELECT d.status, d.job_id, d.delivered_at, d.attempts FROM ferry_outbox_delivery d
		WHERE d.message_id = ` + id + ` AND d.route = ` + route + ` LIMIT 1`
}

// sqlMessageOf reads message id (a column of the enclosing query) by its
// primary key, as a LATERAL subquery, for the same reason: a join of the
// deliveries with their messages is planned from the statistics, and a
// keyed message's chain_seq is NULL until the relay relays it, so that a
// table analyzed while its messages were pending says the chain index
// (ferry_outbox_chain) is empty. The ordered bench's release pass, a join
// planned from such statistics, scanned that index whole for each waiting
// delivery: a billion buffers, 543 s, for 21,642 waiting deliveries. The
// subquery has no condition but the id, so that no partial index matches
// it.
func sqlMessageOf(id string) string {
	return `SELECT m.id, m.topic, m.ordering_key, m.chain_seq, m.traceparent, m.tracestate FROM ferry_outbox m
		WHERE m.id = ` + id + ` LIMIT 1`
}

// order says which deliveries of a relay batch (parallel slices: route,
// topic, ordering key or "", message id) wait behind their chain, and
// which are held back, their messages left pending for the next pass.
// Every keyed delivery but the first of its chain in the batch waits, and
// that one too when its chain's last link is not done with the route. A
// key's messages are held back, for every route, when the lock of one of
// their chains is another's (a delivery handing its turn on, a release
// pass, another relay: the holder might take the chain's next place, or
// miss the batch's message), or when a message of the key pending outside
// the batch has a lower id than one of the batch's (another relay's
// transaction holds it, or it committed after the batch was claimed):
// relayed first, it takes the earlier place. That is any gap, not only
// one before the batch's first message of the key: a claim skips the
// messages other relays hold (SKIP LOCKED), so a batch may hold a key's
// fifth and seventh messages while another relay holds its sixth (the
// ordered bench's three relays put 320 of 50,000 messages out of order
// so). It never waits for a lock.
func order(ctx context.Context, tx pgx.Tx, routes, topics, keys []string, ids []int64) (wait, hold []bool, err error) {
	type chain struct{ route, topic, key string }
	type ofKey struct{ topic, key string }
	first := map[chain]int64{}
	for i, key := range keys {
		if key == "" {
			continue
		}
		c := chain{routes[i], topics[i], key}
		if f, ok := first[c]; !ok || ids[i] < f {
			first[c] = ids[i]
		}
	}
	var cr, ct, ck []string
	var cid []int64
	for c, id := range first {
		cr, ct, ck, cid = append(cr, c.route), append(ct, c.topic), append(ck, c.key), append(cid, id)
	}
	// Each chain's key's last message in the batch, and how many of the
	// key's messages the batch has (a message is in ids once a route).
	type keyed struct {
		last int64
		msgs map[int64]bool
	}
	ofKeys := map[ofKey]*keyed{}
	for i, key := range keys {
		if key == "" {
			continue
		}
		k := ofKey{topics[i], key}
		if ofKeys[k] == nil {
			ofKeys[k] = &keyed{msgs: map[int64]bool{}}
		}
		ofKeys[k].last = max(ofKeys[k].last, ids[i])
		ofKeys[k].msgs[ids[i]] = true
	}
	clast, cmsgs := make([]int64, len(cr)), make([]int64, len(cr))
	for i := range cr {
		k := ofKeys[ofKey{ct[i], ck[i]}]
		clast[i], cmsgs[i] = k.last, int64(len(k.msgs))
	}
	// The locks tried, whether each key has a pending message outside the
	// batch before its last in the batch (more pending up to that one than
	// the batch has: the batch's are pending until it commits), and the
	// chains' last links read, in one round trip; the reads' snapshots are
	// taken once the locks are held.
	b := &pgx.Batch{}
	b.Queue(sqlTryOrderLocks, cr, ct, ck)
	b.Queue(`SELECT (SELECT count(*) FROM ferry_outbox p WHERE p.topic = u.topic AND p.ordering_key = u.key AND p.status = 'pending'
		         AND p.id <= u0.last) > u0.msgs,
		       coalesce(prev.open, false)
		FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $6::bigint[], $7::bigint[]) WITH ORDINALITY AS u0(route, topic, key, id, last, msgs, n)
		CROSS JOIN LATERAL (SELECT u0.route, u0.topic, u0.key, $5::bigint AS seq, u0.id) u
		LEFT JOIN LATERAL (`+sqlPredecessor+`) AS prev(id, open, delivered_at) ON true ORDER BY u0.n`, cr, ct, ck, cid, chainEnd, clast, cmsgs)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, _ := br.Query() // its error is the rows'
	lockedAt, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, nil, fmt.Errorf("lock ordered chains: %w", err)
	}
	locked := make([]bool, len(cr))
	for _, n := range lockedAt {
		locked[n-1] = true
	}
	rows, _ = br.Query()
	type state struct {
		Gapped   bool // a pending message of the key outside the batch comes before one of the batch's
		LastOpen bool
	}
	states, err := pgx.CollectRows(rows, pgx.RowToStructByPos[state])
	if err != nil {
		return nil, nil, fmt.Errorf("read ordered chains: %w", err)
	}
	blocked := map[chain]bool{}
	held := map[ofKey]bool{}
	for i := range cr {
		blocked[chain{cr[i], ct[i], ck[i]}] = states[i].LastOpen
		if !locked[i] || states[i].Gapped {
			held[ofKey{ct[i], ck[i]}] = true
		}
	}
	wait, hold = make([]bool, len(keys)), make([]bool, len(keys))
	for i, key := range keys {
		if key == "" {
			continue
		}
		c := chain{routes[i], topics[i], key}
		hold[i] = held[ofKey{topics[i], key}]
		wait[i] = blocked[c] || ids[i] != first[c]
	}
	return wait, hold, nil
}

// Turn is an ordered chain's turn, handed on by the delivery of its
// message After to Route: the chain's next delivery may start. After 0
// is the turn of the chain's first link (a relay hands it on when it
// relayed the chain's head while another held the chain's lock).
type Turn struct {
	Route, Topic, Key string
	After             int64
}

// Advance hands a chain's turn to the relay, which starts the chain's
// next delivery, batched with the other turns handed to it meanwhile: one
// transaction, and one River insert notification, for many chains, where
// a transaction per delivery would serialise the commits on Postgres's
// notification lock. It never blocks. A turn the relay does not take (it
// stopped, its process died) is taken by a release pass (ReleaseOnce).
func (r *Relay) Advance(t Turn) {
	r.turnsMu.Lock()
	r.turns = append(r.turns, t)
	r.turnsMu.Unlock()
	select {
	case r.turnWake <- struct{}{}:
	default:
	}
}

// handedTurns takes the turns handed to Advance since the last call.
func (r *Relay) handedTurns() []Turn {
	r.turnsMu.Lock()
	defer r.turnsMu.Unlock()
	turns := r.turns
	r.turns = nil
	return turns
}

// turnGather is how long the relay gathers turns before it starts them.
const turnGather = 5 * time.Millisecond

// turnLoop starts the turns handed to Advance, a batch at a time.
func (r *Relay) turnLoop(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.turnWake:
		}
		// A few milliseconds' more turns in the same transaction: on a
		// busy worker each transaction starts dozens of chains, with one
		// commit and one insert notification.
		select {
		case <-ctx.Done():
			return
		case <-time.After(turnGather):
		}
		turns := r.handedTurns()
		if len(turns) == 0 {
			continue
		}
		if _, err := r.TakeTurns(ctx, turns); err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("outbox: ordered deliveries' turns not started; the release pass starts them", "count", len(turns), "error", err)
		}
	}
}

// sqlTurns reads, for each chain (route, topic, key) and message after
// whose delivery to the route is delivered (or after 0: the chain's
// start), the chain's next link after it when that delivery waits for its
// turn: the chain's index, the message's id and trace context.
//
// Deliveries are read by their primary key (sqlDeliveryOf), never joined:
// see sqlPredecessor.
var sqlTurns = `SELECT c.n, x.id, x.traceparent, x.tracestate
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS c(route, topic, key, after, n)
	LEFT JOIN LATERAL (` + sqlMessageOf("c.after") + `) am ON true
	LEFT JOIN LATERAL (` + sqlDeliveryOf("c.after", "c.route") + `) ad ON true
	CROSS JOIN LATERAL (
		SELECT m.id, m.traceparent, m.tracestate, d.status = 'pending' AND d.job_id IS NULL AS waiting
		FROM ferry_outbox m LEFT JOIN LATERAL (` + sqlDeliveryOf("m.id", "c.route") + `) d ON true
		WHERE m.topic = c.topic AND m.ordering_key = c.key AND m.chain_seq IS NOT NULL
		  AND (m.chain_seq, m.id) > (coalesce(am.chain_seq, 0), c.after) AND d.status IS NOT NULL
		ORDER BY m.chain_seq, m.id LIMIT 1) x
	WHERE x.waiting AND (c.after = 0 OR ad.status = 'delivered')`

// TakeTurns starts the next delivery of each chain of turns, if it waits
// for its turn, in one transaction, and returns how many it started.
func (r *Relay) TakeTurns(ctx context.Context, turns []Turn) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) (err error) {
		n, err = r.starter().startTurns(ctx, tx, turns)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: start ordered deliveries: %w", err)
	}
	return n, nil
}

// starter starts waiting deliveries of ordered chains: it inserts their
// jobs with ins (River's client), maxAttempts each (0: DefaultMaxAttempts),
// and wakes their queues' workers on the channel of River's schema (""
// for the connection's current one).
type starter struct {
	ins         Inserter
	schema      string
	maxAttempts int
}

// starter is the relay's: its inserter, schema and MaxAttempts.
func (r *Relay) starter() starter {
	return starter{ins: r.cfg.Inserter, schema: r.cfg.Schema, maxAttempts: r.cfg.MaxAttempts}
}

// startTurns is TakeTurns in tx: under the chains' locks, the next
// delivery of each chain of turns gets its job if it waits for its turn
// (sqlTurns). It is also how a delivery without a relay to hand its turn
// to starts its successor, in the transaction that records it delivered.
func (s starter) startTurns(ctx context.Context, tx pgx.Tx, turns []Turn) (int, error) {
	// Every distinct turn, not one per chain: a chain's turns in one
	// batch may be a delivered link's (whose successor's turn came) and a
	// relay's after a later link not delivered yet (see order), which
	// starts nothing; keeping only the latest would lose the first, and
	// the successor would wait for the release pass. Of several turns of
	// a chain, at most one finds its successor waiting after a delivered
	// link (the chain's links are delivered in order), so no delivery is
	// read twice; a turn handed twice is read once.
	seen := make(map[Turn]bool, len(turns))
	var (
		rs, ts, ks []string
		afters     []int64
	)
	for _, t := range turns {
		if seen[t] {
			continue
		}
		seen[t] = true
		rs, ts, ks, afters = append(rs, t.Route), append(ts, t.Topic), append(ks, t.Key), append(afters, t.After)
	}
	// The locks and the read in one round trip: the read's snapshot is
	// taken once the locks are held, so it sees every commit of their
	// holders.
	b := &pgx.Batch{}
	b.Queue(sqlOrderLocks, rs, ts, ks)
	b.Queue(sqlTurns, rs, ts, ks, afters)
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	if _, err := br.Exec(); err != nil {
		return 0, fmt.Errorf("lock ordered chains: %w", err)
	}
	rows, _ := br.Query() // its error is the rows'
	var (
		i               int
		id              int64
		parent, state   *string
		ids             []int64
		routes          []string
		parents, states []*string
	)
	if _, err := pgx.ForEachRow(rows, []any{&i, &id, &parent, &state}, func() error {
		ids, routes = append(ids, id), append(routes, rs[i-1])
		parents, states = append(parents, parent), append(states, state)
		return nil
	}); err != nil {
		return 0, fmt.Errorf("read the chains' next deliveries: %w", err)
	}
	if err := br.Close(); err != nil {
		return 0, fmt.Errorf("read the chains' next deliveries: %w", err)
	}
	return s.startAll(ctx, tx, ids, routes, parents, states)
}

// DefaultChainBudget is how long one delivery job of an ordered chain goes
// on delivering the chain's next messages itself, once its own is
// delivered (claimNext; DeliverConfig.ChainBudget): a job, a fetch, a
// completion and a turn's transaction saved per message, and no wait in
// the queue between two links of a key. Past it the job hands the turn
// on as any delivery does, to a new job at the back of the queue, so that
// a key with a long backlog does not keep a worker from the other keys'
// for longer.
const DefaultChainBudget = 5 * time.Second

// sqlClaimNext claims, for the job $5, the chain's first link after
// message $4 (route $1, topic $2, key $3) not delivered to the route,
// when it waits for its turn, or is already the job's (claimed before the
// job was snoozed or cut off, after links the job delivered): the
// delivery's job becomes $5, and the message (with its trace context)
// and the delivery's attempts so far are returned. The caller holds the
// chain's lock. Nothing is claimed unless the delivery of message $4 is
// delivered (it may be gone: deleted with its message); then so is every
// link between (links are delivered in order).
var sqlClaimNext = `WITH next AS (
		SELECT m.id, m.payload, m.dedup_key, m.created_at, m.traceparent, m.tracestate, d.attempts,
		       d.status = 'pending' AND (d.job_id IS NULL OR d.job_id = $5) AS ours
		FROM ferry_outbox m LEFT JOIN LATERAL (` + sqlDeliveryOf("m.id", "$1") + `) d ON true
		WHERE m.topic = $2 AND m.ordering_key = $3 AND m.chain_seq IS NOT NULL
		  AND (m.chain_seq, m.id) > ((SELECT chain_seq FROM ferry_outbox WHERE id = $4), $4)
		  AND d.status IS NOT NULL AND d.status <> 'delivered'
		  AND EXISTS (SELECT FROM ferry_outbox_delivery p WHERE p.message_id = $4 AND p.route = $1 AND p.status = 'delivered')
		ORDER BY m.chain_seq, m.id LIMIT 1),
	claimed AS (
		UPDATE ferry_outbox_delivery SET job_id = $5, updated_at = now()
		WHERE message_id = (SELECT id FROM next WHERE ours) AND route = $1 AND status NOT IN ('delivered', 'stuck')
		RETURNING message_id)
	SELECT n.id, n.payload, n.dedup_key, n.created_at, coalesce(n.traceparent, ''), coalesce(n.tracestate, ''), n.attempts
	FROM next n JOIN claimed c ON c.message_id = n.id`

// link is a delivery a job works: the job's own (its args' message), or
// one of its chain claimed after it (claimNext). attempt is the attempt
// it makes: the job's for its own, the delivery's recorded attempts plus
// one for a claimed link (snoozing the job does not count in River).
// claimed is set for a claimed link, with its message's trace context
// (parent, state; empty when untraced), which its request carries instead
// of the job's. unread is set for the job's own link before its message
// is read (msg holds only its ID): a handler's transaction reads it
// (workHandler).
type link struct {
	msg           Message
	attempt       int
	claimed       bool
	unread        bool
	parent, state string
}

// claimNext takes the lock of msg's chain to route and claims its next
// link for job jobID (sqlClaimNext), in one round trip and one
// transaction (a pipeline's implicit one); nil when there is none to
// claim (not relayed yet, none, or another's).
func claimNext(ctx context.Context, pool *pgxpool.Pool, jobID int64, route string, msg Message) (_ *link, err error) {
	b := &pgx.Batch{}
	queueClaimNext(b, jobID, route, msg)
	br := pool.SendBatch(ctx, b)
	defer func() {
		if cerr := br.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("claim the chain's next delivery: %w", cerr)
		}
	}()
	return readClaimNext(br, msg)
}

// queueClaimNext queues in b the lock of msg's chain to route and the
// claim of its next link for job jobID; readClaimNext reads them.
func queueClaimNext(b *pgx.Batch, jobID int64, route string, msg Message) {
	b.Queue(sqlOrderLocks, []string{route}, []string{msg.Topic}, []string{msg.OrderingKey})
	b.Queue(sqlClaimNext, route, msg.Topic, msg.OrderingKey, msg.ID, jobID)
}

func readClaimNext(br pgx.BatchResults, msg Message) (*link, error) {
	if _, err := br.Exec(); err != nil {
		return nil, fmt.Errorf("lock ordered chain: %w", err)
	}
	l := link{msg: Message{Topic: msg.Topic, OrderingKey: msg.OrderingKey}, claimed: true}
	var payload []byte
	err := br.QueryRow().Scan(&l.msg.ID, &payload, &l.msg.DedupKey, &l.msg.CreatedAt, &l.parent, &l.state, &l.attempt)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("claim the chain's next delivery: %w", err)
	}
	l.msg.Payload = payload
	l.attempt++
	return &l, nil
}

// sqlRecordJob records a waiting delivery's job. Its status test is
// written NOT IN ('delivered', 'stuck') (the status CHECK leaves
// 'pending'), not = 'pending': the planner then cannot use a partial
// index on pending deliveries, which it picks on a table it has no
// statistics for (one filled since its last analyze) and which reads
// every pending delivery of the route, not the one by its primary key.
const sqlRecordJob = `UPDATE ferry_outbox_delivery SET job_id = $3, updated_at = now()
	WHERE message_id = $1 AND route = $2 AND status NOT IN ('delivered', 'stuck') AND job_id IS NULL`

// startWaiting inserts the jobs of waiting deliveries (parallel slices),
// in a savepoint, records them, and wakes their queues' workers
// (sqlWakeWorkers, in the same round trip: River's client notifies a
// queue at most once per fetch cooldown, and a turn taken just after
// another would wait for the workers' poll). A queue that refuses them as
// full leaves them waiting: it returns 0 and no error.
func (s starter) startWaiting(ctx context.Context, tx pgx.Tx, ids []int64, routes []string, parents, states []*string) (int, error) {
	params := make([]river.InsertManyParams, len(ids))
	for i := range ids {
		md, err := traceparent.SetMetadata(nil, deref(parents[i]), deref(states[i]))
		if err != nil {
			return 0, err
		}
		params[i] = river.InsertManyParams{
			Args:       DeliverArgs{MessageID: ids[i], Route: routes[i]},
			InsertOpts: &river.InsertOpts{Queue: QueueFor(routes[i]), MaxAttempts: cmp.Or(s.maxAttempts, DefaultMaxAttempts), Metadata: md, Priority: priorityDelivery},
		}
	}
	jobIDs := make([]int64, len(ids))
	err := pgx.BeginFunc(ctx, tx, func(sp pgx.Tx) error {
		res, err := s.ins.InsertManyTx(ctx, sp, params)
		if err != nil {
			return jobs.AsQueueFull(err)
		}
		for i, r := range res {
			jobIDs[i] = r.Job.ID
		}
		// One statement per delivery, by its primary key, in one round
		// trip: a join with unnest is planned from the table's statistics,
		// and a table filled since its last analyze can get a nested loop
		// that reads every waiting delivery once per row.
		b := &pgx.Batch{}
		for i := range ids {
			b.Queue(sqlRecordJob, ids[i], routes[i], jobIDs[i])
		}
		b.Queue(sqlWakeWorkers, s.schema, insertedQueues(params, jobIDs))
		br := sp.SendBatch(ctx, b)
		for i := range ids {
			tag, err := br.Exec()
			if err == nil && tag.RowsAffected() != 1 {
				// Another started it meanwhile: this job would be its
				// second. Never, under the chain's lock; rolled back.
				err = fmt.Errorf("delivery of message %d to route %s no longer waits", ids[i], routes[i])
			}
			if err != nil {
				_ = br.Close()
				return err
			}
		}
		return br.Close()
	})
	if errors.Is(err, jobs.ErrQueueFull) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("start waiting deliveries: %w", err)
	}
	return len(ids), nil
}

// startAll starts waiting deliveries (startWaiting) in one insert; when a
// full queue refuses them, one at a time, so that it keeps only its own
// deliveries waiting (for a later release pass). It returns how many it
// started.
func (s starter) startAll(ctx context.Context, tx pgx.Tx, ids []int64, routes []string, parents, states []*string) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := s.startWaiting(ctx, tx, ids, routes, parents, states)
	if err != nil || n > 0 {
		return n, err
	}
	for k := range ids {
		started, err := s.startWaiting(ctx, tx, ids[k:k+1], routes[k:k+1], parents[k:k+1], states[k:k+1])
		if err != nil {
			return n, err
		}
		n += started
	}
	return n, nil
}

// turnCame is the condition, on a waiting delivery's link prev (read
// with sqlPredecessor), that its turn came more than the parameter secs
// seconds ago: the link before it is delivered since then, or there is
// none. The release pass's read and its recheck under the locks share it.
func turnCame(secs string) string {
	return `(prev.open IS NULL OR (NOT prev.open AND prev.delivered_at < now() - make_interval(secs => ` + secs + `)))`
}

// sqlReleasable lists, oldest first, the first waiting delivery of each
// chain whose turn came more than $2 seconds ago without a job: its
// predecessor in the chain was delivered before then (or it has none).
// Turns just handed on are the relay's (Advance) to take.
var sqlReleasable = `WITH heads AS (
		SELECT DISTINCT ON (d.route, m.topic, m.ordering_key) d.route, m.topic, m.ordering_key AS key, m.chain_seq AS seq, m.id,
		       m.traceparent, m.tracestate
		FROM ferry_outbox_delivery d CROSS JOIN LATERAL (` + sqlMessageOf("d.message_id") + `) m
		WHERE d.status = 'pending' AND d.job_id IS NULL AND m.chain_seq IS NOT NULL
		ORDER BY d.route, m.topic, m.ordering_key, m.chain_seq, m.id)
	SELECT u.route, u.topic, u.key, u.id, u.traceparent, u.tracestate
	FROM heads u
	LEFT JOIN LATERAL (` + sqlPredecessor + `) AS prev(id, open, delivered_at) ON true
	WHERE ` + turnCame("$2") + `
	ORDER BY u.seq, u.id LIMIT $1`

// sqlStillReleasable returns which of the heads u(route, topic, key, id)
// read by sqlReleasable still are, under their chains' locks (their
// indexes, from 1): the delivery still waits without a job, and the link
// before it is delivered more than $5 seconds ago, or there is none.
var sqlStillReleasable = `SELECT u.n
	FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS r(route, topic, key, id, n)
	CROSS JOIN LATERAL (` + sqlMessageOf("r.id") + `) um
	CROSS JOIN LATERAL (SELECT r.route, r.topic, r.key, um.chain_seq AS seq, r.id, r.n) u
	CROSS JOIN LATERAL (` + sqlDeliveryOf("u.id", "u.route") + `) d
	LEFT JOIN LATERAL (` + sqlPredecessor + `) AS prev(id, open, delivered_at) ON true
	WHERE d.status = 'pending' AND d.job_id IS NULL AND ` + turnCame("$5") + `
	ORDER BY u.n`

// sqlTryOrderLocks takes the chains' locks that are free, and returns the
// chains it locked (their indexes, from 1): the release pass leaves the
// chains that a relay or a delivery is handing on.
const sqlTryOrderLocks = `SELECT n FROM unnest($1::text[], $2::text[], $3::text[]) WITH ORDINALITY AS u(r, t, k, n)
	WHERE pg_try_advisory_xact_lock(` + orderLockKey + `)`

// ReleaseOnce gives their jobs to up to BatchSize waiting deliveries of
// ordered chains whose turn came more than PollInterval ago without one
// (see the package doc, "Ordered delivery"), and returns how many it
// released. The relay runs it every ReleaseInterval; normally there is
// nothing to do, as each delivery hands its turn on. One relay at a time
// runs it (another's pass returns 0 at once), and it never waits for a
// chain's lock: a chain locked by another is being handed on.
func (r *Relay) ReleaseOnce(ctx context.Context) (int, error) {
	var n int
	err := pgx.BeginFunc(ctx, r.cfg.Pool, func(tx pgx.Tx) error {
		var ours bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock(hashtextextended('ferry.outbox.release', 0))`).Scan(&ours); err != nil || !ours {
			return err
		}
		type head struct {
			route, topic, key string
			id                int64
			parent, state     *string
		}
		rows, err := tx.Query(ctx, sqlReleasable, r.cfg.BatchSize, r.cfg.PollInterval.Seconds())
		if err != nil {
			return err
		}
		var (
			h     head
			heads []head
		)
		if _, err := pgx.ForEachRow(rows, []any{&h.route, &h.topic, &h.key, &h.id, &h.parent, &h.state}, func() error {
			heads = append(heads, h)
			return nil
		}); err != nil || len(heads) == 0 {
			return err
		}
		var rs, ts, ks []string
		for _, h := range heads {
			rs, ts, ks = append(rs, h.route), append(ts, h.topic), append(ks, h.key)
		}
		rows, err = tx.Query(ctx, sqlTryOrderLocks, rs, ts, ks)
		if err != nil {
			return fmt.Errorf("lock ordered chains: %w", err)
		}
		locked, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("lock ordered chains: %w", err)
		}
		if len(locked) == 0 {
			return nil
		}
		// Checked again under the locks, the locked chains' heads only (a
		// second read of every waiting delivery would double the pass): a
		// turn may have been taken since, or an earlier message relayed.
		var mr, mt, mk []string
		var mid []int64
		for _, i := range locked {
			h := heads[i-1]
			mr, mt, mk, mid = append(mr, h.route), append(mt, h.topic), append(mk, h.key), append(mid, h.id)
		}
		rows, err = tx.Query(ctx, sqlStillReleasable, mr, mt, mk, mid, r.cfg.PollInterval.Seconds())
		if err != nil {
			return fmt.Errorf("check ordered chains: %w", err)
		}
		still, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return fmt.Errorf("check ordered chains: %w", err)
		}
		var (
			ids             []int64
			routes          []string
			parents, states []*string
		)
		for _, i := range still {
			h := heads[locked[i-1]-1]
			ids, routes = append(ids, h.id), append(routes, h.route)
			parents, states = append(parents, h.parent), append(states, h.state)
		}
		n, err = r.starter().startAll(ctx, tx, ids, routes, parents, states)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("outbox: release ordered deliveries: %w", err)
	}
	return n, nil
}
