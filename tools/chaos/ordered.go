package main

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The ordered outbox load: writers of one ordering key in overlapping
// transactions that commit out of id order, and a receiver that counts the
// deliveries of each key in flight.

const (
	// orderedKeys is how many keys are written at once, each by its pair
	// of writers.
	orderedKeys = 3
	// orderedEvery is the pause between a key's rounds.
	orderedEvery = 150 * time.Millisecond
	// orderedHold is how long the receiver holds a keyed delivery before
	// it answers: a second delivery of the key begun meanwhile is seen in
	// flight beside it.
	orderedHold = 20 * time.Millisecond
)

// keyedPayload is a keyed message's payload: its key, and its place in
// the key's commit order.
type keyedPayload struct {
	Key string `json:"key"`
	N   int64  `json:"n"`
}

// produceOrdered writes, until ctx ends, rounds of two messages of one
// ordering key per writer pair: writer 1 inserts (the lower id) and holds
// its transaction open, writer 2 inserts and commits, then writer 1
// commits. Each message's payload carries its place in the key's commit
// order. A round with a failed statement (a fault) is rolled back and its
// key given up for a new one: its commit order is not known, so the order
// check leaves it out (abandoned), though its committed messages count
// for the delivery checks like any other. rounds counts the rounds that
// committed.
func (s *suite) produceOrdered(ctx context.Context, rounds *atomic.Int64, abandoned *keySet) {
	var wg sync.WaitGroup
	for w := range orderedKeys {
		wg.Go(func() {
			gen, n := 0, int64(0)
			key := fmt.Sprintf("key-%d-%d", w, gen)
			t := time.NewTicker(orderedEvery)
			defer t.Stop()
			for ctx.Err() == nil {
				if err := s.orderedRound(ctx, key, n); err == nil {
					n += 2
					rounds.Add(1)
				} else {
					abandoned.add(key)
					gen, n = gen+1, 0
					key = fmt.Sprintf("key-%d-%d", w, gen)
				}
				select {
				case <-ctx.Done():
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
}

// orderedRound is one round of key's writers: the first message (the
// lower id) commits second, so it is n+2, the second n+1.
func (s *suite) orderedRound(ctx context.Context, key string, n int64) error {
	insert := func(tx pgx.Tx, at int64) error {
		payload, _ := json.Marshal(keyedPayload{Key: key, N: at})
		_, err := tx.Exec(ctx, `INSERT INTO ferry_outbox (topic, payload, ordering_key) VALUES ('chaos.event', $1::jsonb, $2)`, string(payload), key)
		return err
	}
	first, err := s.jobPool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = first.Rollback(context.WithoutCancel(ctx)) }()
	if err := insert(first, n+2); err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, s.jobPool, func(second pgx.Tx) error { return insert(second, n+1) })
	if err != nil {
		return err
	}
	return first.Commit(ctx)
}

// keySet is a set of ordering keys, safe for concurrent use.
type keySet struct {
	mu   sync.Mutex
	keys []string
}

func (k *keySet) add(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.keys = append(k.keys, key)
}

func (k *keySet) list() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]string{}, k.keys...)
}

// inFlight counts the receiver's keyed deliveries in flight: by key, the
// messages (event ids) delivered and not yet answered, and the most
// messages of one key it saw in flight at once. A delivery is in flight
// from its arrival until it is answered or its sender hangs up (the
// receiver's handler ends it then): a sender that timed out, or died,
// delivers nothing more with that request. A delivery of a message the
// receiver already recorded is a redelivery, counted apart: a sender
// paused while its request was on its way (SIGSTOP, a partition) is
// declared dead, its job rescued and the message delivered by another
// worker, and its request may still arrive when it wakes, beside the
// key's next message. Two deliveries of one message at once are one
// message in flight (the second counted as beside it): ordering is
// between messages; a message delivered twice is at-least-once delivery,
// which the receiver's UNIQUE absorbs and the outbox check counts.
type inFlight struct {
	mu          sync.Mutex
	now         map[string]map[string]int // key → event id → deliveries in flight
	received    map[string]bool           // event ids recorded
	max         int
	over        string // a key seen with more than one message in flight, and the messages
	total       int64  // keyed arrivals
	redelivered int64  // keyed arrivals of a message already recorded
	beside      int64  // keyed arrivals of a message whose delivery was in flight
}

// enter records the arrival of a delivery of message id of key, and
// returns the function that records its answer.
func (f *inFlight) enter(key, id string) (leave func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.total++
	if f.received[id] {
		f.redelivered++
		return func() {}
	}
	if f.now == nil {
		f.now = map[string]map[string]int{}
	}
	if f.now[key] == nil {
		f.now[key] = map[string]int{}
	}
	if f.now[key][id] > 0 {
		f.beside++
	}
	f.now[key][id]++
	if n := len(f.now[key]); n > f.max {
		f.max = n
		if n > 1 {
			f.over = key + ": messages " + strings.Join(slices.Sorted(maps.Keys(f.now[key])), ", ")
		}
	}
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.now[key][id]--; f.now[key][id] == 0 {
			delete(f.now[key], id)
		}
	}
}

// record notes that the receiver recorded message id.
func (f *inFlight) record(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.received == nil {
		f.received = map[string]bool{}
	}
	f.received[id] = true
}

// orderedObs is the ordered load: the rounds committed and the keys given
// up, what the receiver saw in flight, and, in one snapshot, the keyed
// messages committed, received (once each), lost, and first received
// after a message of their key committed later by the harness's clock
// (keys given up left out).
type orderedObs struct {
	rounds, arrivals, redelivered, beside int64
	abandoned                             int
	maxInFlight                           int
	over                                  string
	committed, received, lost, outOfOrder int64
	err                                   error
}

func observeOrdered(ctx context.Context, pool *pgxpool.Pool, rounds int64, abandoned []string, f *inFlight) orderedObs {
	f.mu.Lock()
	o := orderedObs{rounds: rounds, abandoned: len(abandoned), maxInFlight: f.max, over: f.over, arrivals: f.total, redelivered: f.redelivered, beside: f.beside}
	f.mu.Unlock()
	err := pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM ferry_outbox WHERE ordering_key IS NOT NULL),
		(SELECT count(*) FROM chaos_received WHERE ordering_key IS NOT NULL),
		(SELECT count(*) FROM ferry_outbox o WHERE o.ordering_key IS NOT NULL
			AND NOT EXISTS (SELECT 1 FROM chaos_received r WHERE r.event_id = o.id::text)),
		(SELECT count(*) FROM (SELECT n, lag(n) OVER (PARTITION BY ordering_key ORDER BY arrived) AS prev
			FROM chaos_received WHERE ordering_key IS NOT NULL AND ordering_key <> ALL (coalesce($1::text[], '{}'))) r WHERE r.prev > r.n)`,
		abandoned).Scan(&o.committed, &o.received, &o.lost, &o.outOfOrder)
	if err != nil {
		o.err = fmt.Errorf("count keyed messages and arrivals: %w", err)
	}
	return o
}

// checkOrdered: of each key, written by writers whose transactions
// overlap and commit out of id order, at most one message of a key is in
// flight at the receiver at any moment (a redelivery of a message already
// received is counted apart: see inFlight), and every keyed message is received
// (once: the receiver records an event once). No keyed message delivered
// is nothing to check. How many first arrived before a message of their
// key that their round's writer committed earlier is shown, not judged:
// of two messages both committed before a relay pass sees either, the
// relay cannot tell which committed first (it orders them by id), so
// the harness's commit order is not one ferry can be held to there.
func checkOrdered(o orderedObs) check {
	switch {
	case o.err != nil:
		return newCheck(nameOrdered, verdictUnverified, "query failed: %v", o.err)
	case o.received == 0 || o.arrivals == 0:
		return newCheck(nameOrdered, verdictUnverified, "0 keyed messages received (%d committed in %d rounds): nothing to check", o.committed, o.rounds)
	}
	result := fmt.Sprintf("%d keyed messages committed in %d rounds (%d keys given up after a failed write), %d received once each, %d lost; at most %d of a key in flight (apart: %d redeliveries of a message already received, %d beside its delivery in flight); %d first arrived before a message its writer committed earlier (shown, not judged)",
		o.committed, o.rounds, o.abandoned, o.received, o.lost, o.maxInFlight, o.redelivered, o.beside, o.outOfOrder)
	if o.maxInFlight > 1 {
		return newCheck(nameOrdered, verdictViolated, "%s (key %s)", result, o.over)
	}
	if o.received != o.committed || o.lost != 0 {
		return newCheck(nameOrdered, verdictViolated, "%s", result)
	}
	return newCheck(nameOrdered, verdictOK, "%s", result)
}

// waitKeyed waits up to timeout for the receiver to record a keyed
// message, and says how long that took.
func (s *suite) waitKeyed(ctx context.Context, timeout time.Duration) (string, error) {
	at := time.Now()
	for time.Since(at) < timeout {
		var ok bool
		err := s.pool.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM chaos_received WHERE ordering_key IS NOT NULL)").Scan(&ok)
		if err == nil && ok {
			return fmt.Sprintf("none: %d keys, a keyed message received after %s", orderedKeys, time.Since(at).Round(time.Millisecond)), nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return "", fmt.Errorf("no keyed message received within %s", timeout)
}
