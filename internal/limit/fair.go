package limit

import (
	"container/heap"
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// fairReload is how often a worker reads a fair queue's active gates
// whole; in between it reads those activated since (an activation whose
// transaction commits after a later one's is found by the next whole
// read).
const fairReload = 2 * time.Second

// startedFlush is how often a worker adds the jobs it claimed from each
// gate to the gate's started count (Run).
const startedFlush = 5 * time.Second

// sqlFairGates reads the active gates of a queue ($1) activated after $2
// (0: all of them).
const sqlFairGates = `SELECT id, parts, activated FROM ferry_limit_gate
WHERE queue = $1 AND active AND activated > $2`

// fairQueue is a worker's view of a fair queue: the active gates it
// knows, each with its pass (stride scheduling: a gate's pass grows by
// 1/weight with each job claimed from it, and the claim serves the
// gates of the lowest passes first, so that under saturation each key
// starts jobs in proportion to its weight). The passes are this
// worker's: each worker serves the keys in their weights' proportion,
// so the workers together do too. A gate that becomes active joins at
// the lowest pass of the queue, so a key that comes back after a quiet
// spell is served at the next claim, with no credit for the spell.
type fairQueue struct {
	queue string
	fair  *Fairness
	field string // the fairness's limit name: its part of each gate

	mu      sync.Mutex
	byID    map[int64]*fairGate
	h       fairHeap
	seen    int64     // the highest activation read
	loaded  time.Time // the last whole read
	vtime   float64   // the lowest pass the last claim served from
	started map[int64]int64
}

// fairGate is a gate of a fair queue with its weight and pass.
type fairGate struct {
	gate
	weight float64
	pass   float64
	idx    int // in the heap; -1 when taken out by a claim
}

// fairHeap orders gates by pass, then id.
type fairHeap []*fairGate

func (h fairHeap) Len() int { return len(h) }
func (h fairHeap) Less(i, j int) bool {
	if h[i].pass != h[j].pass {
		return h[i].pass < h[j].pass
	}
	return h[i].id < h[j].id
}

func (h fairHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx, h[j].idx = i, j
}

func (h *fairHeap) Push(x any) {
	g := x.(*fairGate) //nolint:forcetypeassert // only fairGates are pushed
	g.idx = len(*h)
	*h = append(*h, g)
}

func (h *fairHeap) Pop() any {
	old := *h
	g := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	g.idx = -1
	return g
}

func newFairQueue(lim *Limit) *fairQueue {
	return &fairQueue{queue: lim.Queue, fair: lim.Fair, field: lim.Name, byID: map[int64]*fairGate{}, started: map[int64]int64{}}
}

// refresh reads the gates activated since the last read (all of them
// every fairReload), keeping the passes of those it knows; enforced says
// whether this worker enforces every limit of a gate (it leaves the
// others to the workers that do).
func (f *fairQueue) refresh(ctx context.Context, q Querier, enforced func(gate) bool) error {
	whole := time.Since(f.loaded) >= fairReload
	after := f.seen
	if whole {
		after = 0
	}
	rows, err := q.Query(ctx, sqlFairGates, f.queue, after)
	if err != nil {
		return fmt.Errorf("read gates: %w", err)
	}
	type read struct {
		g         gate
		activated int64
	}
	gates, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (read, error) {
		var r read
		var raw [][2]string
		if err := row.Scan(&r.g.id, &raw, &r.activated); err != nil {
			return r, err
		}
		for _, p := range raw {
			r.g.parts = append(r.g.parts, part{name: p[0], key: p[1]})
		}
		return r, nil
	})
	if err != nil {
		return fmt.Errorf("read gates: %w", err)
	}
	if whole {
		// Gates no longer active were drained by another worker.
		active := make(map[int64]bool, len(gates))
		for _, r := range gates {
			active[r.g.id] = true
		}
		for id, g := range f.byID {
			if !active[id] {
				f.remove(g)
			}
		}
		f.loaded = time.Now()
		if f.vtime > 1e9 { // keep the passes' precision: they only compare
			for _, g := range f.h {
				g.pass -= f.vtime
			}
			f.vtime = 0
		}
	}
	if len(f.h) > 0 {
		f.vtime = max(f.vtime, f.h[0].pass)
	}
	for _, r := range gates {
		f.seen = max(f.seen, r.activated)
		if f.byID[r.g.id] != nil || !enforced(r.g) {
			continue
		}
		g := &fairGate{gate: r.g, weight: f.weight(r.g), pass: f.vtime}
		f.byID[g.id] = g
		heap.Push(&f.h, g)
	}
	return nil
}

// weight is a gate's weight: its key's of the fairness.
func (f *fairQueue) weight(g gate) float64 {
	for _, p := range g.parts {
		if p.name == f.field {
			return f.fair.Weight(p.key)
		}
	}
	return f.fair.Default()
}

func (f *fairQueue) remove(g *fairGate) {
	if g.idx >= 0 {
		heap.Remove(&f.h, g.idx)
	}
	delete(f.byID, g.id)
}

// take takes out the n gates of the lowest passes, in order.
func (f *fairQueue) take(n int) []*fairGate {
	out := make([]*fairGate, 0, min(n, len(f.h)))
	for len(out) < n && len(f.h) > 0 {
		out = append(out, heap.Pop(&f.h).(*fairGate)) //nolint:forcetypeassert // only fairGates are pushed
	}
	if len(out) > 0 {
		f.vtime = max(f.vtime, out[0].pass)
	}
	return out
}

// settle puts back the gates take gave, their passes moved by what the
// claim did with each, and counts the jobs claimed from each (outcomes[i]
// is gates[i]'s; nil: the claim failed, nothing moves).
func (f *fairQueue) settle(gates []*fairGate, outcomes []gateOutcome) {
	for i, g := range gates {
		if outcomes != nil {
			o := outcomes[i]
			f.started[g.id] += int64(o.got)
			switch {
			case o.drained:
				delete(f.byID, g.id)
				continue
			case o.got > 0:
				g.pass += float64(o.got) / g.weight
			case o.blocked:
				// Its limits had no room: it waits a turn, so that the
				// gates behind it are served.
				g.pass += 1 / g.weight
			}
		}
		heap.Push(&f.h, g)
	}
}

// flush adds the jobs claimed from each gate since the last flush to the
// gates' started counts (Run's, every startedFlush; counts a failed write
// loses are shown, not relied on).
func (f *fairQueue) flush(ctx context.Context, q Execer) error {
	f.mu.Lock()
	var ids, ns []int64
	for _, id := range slices.Sorted(maps.Keys(f.started)) {
		if n := f.started[id]; n > 0 {
			ids, ns = append(ids, id), append(ns, n)
		}
	}
	clear(f.started)
	f.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	if _, err := q.Exec(ctx, sqlAddStarted, ids, ns); err != nil {
		return fmt.Errorf("fairness: count the starts of queue %q: %w", f.queue, err)
	}
	return nil
}

// Execer is what flush writes through: a pool, a connection or a
// transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// sqlAddStarted adds the jobs claimed from the gates $1, $2 each.
const sqlAddStarted = `INSERT INTO ferry_limit_gate_started AS s (gate_id, started)
SELECT * FROM unnest($1::bigint[], $2::bigint[])
ON CONFLICT (gate_id) DO UPDATE SET started = s.started + excluded.started`

// gateOutcome is what a claim did with a gate it was given.
type gateOutcome struct {
	got     int  // jobs claimed
	drained bool // fewer than asked: none left parked (marked inactive)
	blocked bool // held, but its limits had no room for a job
}
