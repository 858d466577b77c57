// Package queuecap is the queues a worker works (Section: their worker
// counts, bounds and how River fetches and times their jobs) and the
// worker side of bounded queues (package jobs, "Bounded queues", a
// library module that inserting services import): the capability that
// records this worker's bound and worker count of every
// queue it works or bounds in ferry_queue, and gives back, on the leader,
// the admissions of transactions that rolled back; and priority aging,
// the order in which the worker fetches (aging.go).
package queuecap

import (
	"maps"
	"slices"
	"time"

	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/jobs"
)

// RecountEvery is how often the leader gives back the admissions of
// transactions that rolled back (jobs.QueueRecounter).
const RecountEvery = time.Minute

// Capability is the bounded queues' capability.
type Capability struct{ sec Section }

// New returns the capability of sec.
func New(sec Section) *Capability { return &Capability{sec: sec} }

// Name is "queues".
func (*Capability) Name() string { return "queues" }

// Build records the bounds now (the last worker started wins, and says
// which bounds it changed), the recount on the leader ("queue-recount")
// and, with priority aging, the fetch that ages.
func (c *Capability) Build(b *capability.Build) error {
	changes, err := jobs.SetQueueBounds(b.Ctx, b.Pool, Bounds(c.sec, b.Queues))
	if err != nil {
		return err
	}
	jobs.LogBoundChanges(b.Logger, changes)
	b.Leader("queue-recount", jobs.QueueRecounter(b.Pool, RecountEvery, b.Logger))
	if c.sec.PriorityAging > 0 && b.Pilot != nil {
		return b.Pilot.SetGetAvailable(agingFetch(b.Pool, c.sec.PriorityAging))
	}
	return nil
}

// Bounds is the bound and worker count of every queue this process works
// (workers, by count) or bounds, as jobs.SetQueueBounds records them.
func Bounds(sec Section, workers map[string]int) []jobs.QueueBound {
	names := slices.Collect(maps.Keys(workers))
	for q := range sec.MaxLengths {
		if _, ok := workers[q]; !ok {
			names = append(names, q)
		}
	}
	slices.Sort(names)
	out := make([]jobs.QueueBound, 0, len(names))
	for _, q := range names {
		bound, ok := sec.MaxLengths[q]
		if !ok {
			bound = sec.MaxLength
		}
		out = append(out, jobs.QueueBound{Name: q, MaxLength: bound, Workers: workers[q]})
	}
	return out
}
