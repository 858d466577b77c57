// Package lockcap is the worker side of named locks (package locks, a
// library module): the capability that gives a ferry server its locks
// client, on the sessions' pool, and the locks' metrics.
package lockcap

import (
	"github.com/ferryq/ferry/internal/capability"
	"github.com/ferryq/ferry/internal/metrics"
	"github.com/ferryq/ferry/locks"
)

// Capability is the named locks' capability; it has no configuration.
type Capability struct{ client *locks.Client }

// New returns the capability.
func New() *Capability { return &Capability{} }

// Name is "locks".
func (*Capability) Name() string { return "locks" }

// Client is the server's locks client, once built (Server.Locks).
func (c *Capability) Client() *locks.Client { return c.client }

// Build makes the client on the sessions' pool (a lock wait holds a
// session), whose locks show in /metrics (ferry_locks_held,
// ferry_lock_acquisitions_total, ferry_lock_losses_total by name).
func (c *Capability) Build(b *capability.Build) error {
	observer, err := metrics.NewLockObserver(b.Metrics)
	if err != nil {
		return err
	}
	c.client = locks.New(b.Sessions, locks.Config{Observer: observer})
	return nil
}
