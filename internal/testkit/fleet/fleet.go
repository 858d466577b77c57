package fleet

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"
)

// Fleet is a group of processes started together. Their output wakes one
// waiter, so WaitForRecord can wait on all of them at once. A Fleet's
// methods are safe for concurrent use.
type Fleet struct {
	out *notifier

	mu    sync.Mutex
	procs []*Proc
}

// New returns an empty fleet.
func New() *Fleet { return &Fleet{out: newNotifier()} }

// Start starts bin with args as Start does, as a member of the fleet.
func (f *Fleet) Start(bin string, env []string, args ...string) (*Proc, error) {
	p, err := start(f.out, bin, env, nil, args)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.procs = append(f.procs, p)
	f.mu.Unlock()
	return p, nil
}

// Procs returns every process the fleet started, in order, exited or not.
func (f *Fleet) Procs() []*Proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.procs)
}

// Live returns the processes that have not exited, in the order started.
func (f *Fleet) Live() []*Proc {
	var live []*Proc
	for _, p := range f.Procs() {
		if !p.Exited() {
			live = append(live, p)
		}
	}
	return live
}

// Kill kills every live process's group (SIGKILL) and waits up to timeout
// for each to be reaped.
func (f *Fleet) Kill(timeout time.Duration) error {
	var errs []error
	for _, p := range f.Live() {
		if err := p.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			errs = append(errs, err)
		}
	}
	deadline := time.Now().Add(timeout)
	for _, p := range f.Procs() {
		if _, err := p.Wait(time.Until(deadline)); err != nil {
			errs = append(errs, fmt.Errorf("%s not reaped %s after SIGKILL", p, timeout))
		}
	}
	return errors.Join(errs...)
}

// Mark is how far each process's output had been written when Mark was
// called; output of processes started later is all after it.
type Mark map[*Proc][2]int

// Mark returns the fleet's output position now: WaitForRecord with it sees
// only what is written afterwards.
func (f *Fleet) Mark() Mark {
	m := Mark{}
	for _, p := range f.Procs() {
		m[p] = p.offsets()
	}
	return m
}

// WaitForRecord waits up to timeout for a JSON log record, written by any of
// the fleet's processes after since (a nil Mark: since each one started),
// for which match returns true, and returns it; the record's Proc is set
// before match sees it. Records of one process are seen in the order
// written to each of its outputs; of two processes, in no promised order.
// A timeout of 0 looks once at what has been written.
func (f *Fleet) WaitForRecord(since Mark, timeout time.Duration, match func(Record) bool) (Record, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	offs := map[*Proc]*[2]int{}
	for {
		changed := f.out.changed()
		for _, p := range f.Procs() {
			off, ok := offs[p]
			if !ok {
				o := since[p]
				off = &o
				offs[p] = off
			}
			var rec Record
			_, found, _ := p.scan(off, func(line string) bool {
				r, ok := ParseRecord(line)
				r.Proc = p
				if ok && match(r) {
					rec = r
					return true
				}
				return false
			})
			if found {
				return rec, nil
			}
		}
		if timeout <= 0 {
			return Record{}, errors.New("no such log record yet")
		}
		select {
		case <-changed:
		case <-t.C:
			return Record{}, fmt.Errorf("no such log record in %s", timeout)
		}
	}
}
